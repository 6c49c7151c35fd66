//! The operator guide's "A real multi-node cluster" section, followed
//! command by command on four hosts, then its maintenance part under fio
//! load with verification, with each step's time and data moved.
//!
//! # The hosts
//!
//! Each host of the guide (node1, node2, node3 and client) is a network
//! namespace of a [`Testbed`] (one L2 switch; each host also gets the
//! guide's address, 192.0.2.11-13 and .21, beside the testbed's own) and
//! one bash session in it, started by `multinode_guide/host.sh` as
//! `ip netns exec NS unshare --mount --uts ... host.sh`. The script makes
//! the session a Debian machine of its own, so that the guide's commands
//! run literally, paths included:
//! - its root is an overlay of the machine's root with a directory of the
//!   host's own on top, so `dpkg -i ./pontoon_*_amd64.deb` really installs
//!   the package built from the binary under test (`scripts/build-deb.sh
//!   --no-build`, cached beside the binary), its postinst makes the
//!   `pontoon` user, and `/etc/pontoon`, `/etc/default/etcd` and
//!   `/var/lib/etcd` are the host's own. (`ip netns exec` alone would give
//!   each host its own `/etc/pontoon` only through `/etc/netns/NS/`, which
//!   needs `/etc/pontoon` to exist on the machine, and no package.)
//! - its `/dev` holds the guide's drive names (`/dev/nvme0n1`, ...) as
//!   block device nodes of loop devices over sparse 2 GiB files, so OSDs
//!   get real block devices (O_EXCL, BLKGETSIZE64); the loop devices are
//!   detached by name at the end, also after a panic;
//! - its host name is the guide's, which OSDs register as their host.
//!
//! Blocks are run in order, each on the hosts its info string names
//! (```` ```console node1 node2 ````: on each, at the same time, as the
//! guide asks for etcd), stopping at the first command that fails.
//! A `$ ` line with a here-document takes the lines up to its delimiter.
//!
//! # What is simulated
//!
//! systemd cannot run in these hosts (no init, one kernel), so `systemctl`
//! is `multinode_guide/systemctl`, a stand-in on each host's PATH that
//! runs the units' `ExecStart` lines itself, from the installed unit files
//! (the package's, and Debian's `etcd.service` with `/etc/default/etcd`),
//! as their `User=`, with readiness through `$NOTIFY_SOCKET`, and stops
//! them with SIGTERM; its documentation lists what it does not do
//! (`Restart=`, sandboxing). tests/package.rs checks the units with
//! `systemd-analyze verify`. `systemctl reboot` stops the host's units,
//! waits [`REBOOT_DOWNTIME`] and starts the enabled ones again: the
//! services' view of a reboot. The kernel NBD client is not run (one
//! kernel for all hosts); the client uses the gateway through libnbd
//! (nbdinfo, fio's nbd engine). etcd is the guide's own: Debian's
//! etcd-server, three members on node1-3, configured and started by the
//! guide's commands (not the testbed's `start_etcd`).
//!
//! # The maintenance steps, under load
//!
//! While the guide's maintenance blocks run, fio writes the volume from
//! the client host through its NBD gateway (`--ioengine=nbd`, 64 KiB
//! random writes, every one read back and checked, `--verify=crc32c
//! --verify_backlog`); it must report no error. The test's own actions
//! between blocks, found by the commands the blocks hold:
//! - (a) rolling reboot: once `noout` and `norebalance` are set,
//!   out-after is shortened to [`OUT_AFTER_DURING_REBOOTS`] (below the
//!   downtime, so without `noout` the rebooted OSDs would go out), and a
//!   poller checks every second that no OSD goes out and no PG's acting
//!   set takes an OSD it did not have (no backfill); after each `systemctl
//!   reboot`, the cluster must be clean again with every PG on the OSDs it
//!   had;
//! - (b) failed drive: before the block with `osd destroy`, osd.3 (node2's
//!   `/dev/nvme1n1`) is killed with SIGKILL and its device discarded (the
//!   new, blank drive); after `osd replace` and the unit's start, backfill
//!   must make the cluster clean;
//! - (c) new drive: after node3's new OSD and `balancer on`, every OSD's PG
//!   count must come within 5% of the mean (`pg ls --json`, and `balancer
//!   eval --json`).
//!
//! Before the maintenance part the test writes 512 MiB to the volume, so
//! that backfill has data to move. Data moved is measured two ways: the
//! bytes the OSDs' recovery and backfill installed
//! (`pontoon_osd_recovery_bytes_total` of every OSD's /metrics, restarts
//! accounted), and the change of each OSD's used bytes. Last, every stop
//! of a Pontoon daemon (by `systemctl stop` or `reboot`) must have ended
//! with exit status 0 soon after SIGTERM, but the OSD the test killed.
//!
//! Needs root, iproute2, nftables, util-linux (losetup, unshare,
//! blkdiscard), python3 (the systemctl stand-in), dpkg-deb, etcd-server,
//! fio with its nbd engine and libnbd-bin, as installed by scripts/deps.sh.
//! `PONTOON_TEST_KEEP=1` keeps the hosts' directories and logs.

mod common;

use common::*;
use pontoon_testbed::{Host, Testbed};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

const GUIDE: &str = include_str!("../../../docs/operator-guide.md");
const SECTION: &str = "## A real multi-node cluster";
const SYSTEMCTL: &str = include_str!("multinode_guide/systemctl");
const HOST_SH: &str = include_str!("multinode_guide/host.sh");

/// The guide's servers: name, address, drives (the last of node3 is the
/// one added in the end).
const SERVERS: [(&str, &str, &[&str]); 3] = [
    ("node1", "192.0.2.11", &["nvme0n1", "nvme1n1"]),
    ("node2", "192.0.2.12", &["nvme0n1", "nvme1n1"]),
    ("node3", "192.0.2.13", &["nvme0n1", "nvme1n1"]),
];
const CLIENT: (&str, &str) = ("client", "192.0.2.21");
const ETCD: &str = "http://192.0.2.11:2379,http://192.0.2.12:2379,http://192.0.2.13:2379";
/// The size of every data drive.
const DRIVE_SIZE: &str = "2G";
/// What the test writes before the maintenance steps, and where its fio
/// load writes during them.
const DATA: &str = "512M";
/// The guide's pool.
const PGS: usize = 128;
/// How long `systemctl reboot` keeps a host's services down.
const REBOOT_DOWNTIME: Duration = Duration::from_secs(8);
/// Out-after during the rolling reboot (the default is 10 minutes).
const OUT_AFTER_DURING_REBOOTS: &str = "5s";
/// Longest one guide command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest the cluster may take to be clean after a step.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest the balancer may take to even the PGs out.
const BALANCE_TIMEOUT: Duration = Duration::from_secs(120);

/// Each PG's acting set, by PG id.
type Acting = BTreeMap<String, BTreeSet<u32>>;
/// Each OSD's pid and recovery bytes.
type Scrape = BTreeMap<u32, (u32, u64)>;

// ---------------------------------------------------------------- the guide

/// One ```console block of the section: the hosts it runs on, its commands.
#[derive(Debug, Clone)]
struct Block {
    hosts: Vec<String>,
    cmds: Vec<String>,
    /// Its line in docs/operator-guide.md.
    line: usize,
}

impl Block {
    fn has(&self, prefix: &str) -> bool {
        self.cmds.iter().any(|c| c.starts_with(prefix))
    }
}

/// The here-document delimiter of a command line, if it has one
/// (`<<EOF`, `<<'EOF'`, `<< "EOF"`, `<<-EOF`).
fn heredoc_delimiter(cmd: &str) -> Option<String> {
    let rest = cmd.split_once("<<")?.1;
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim_start();
    let word: String = rest
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The console blocks of the multi-node section, in order.
fn section_blocks(md: &str) -> Vec<Block> {
    let start = md
        .find(SECTION)
        .unwrap_or_else(|| panic!("docs/operator-guide.md has no {SECTION:?} section"));
    let first_line = md[..start].lines().count();
    let body = &md[start + SECTION.len()..];
    let end = body.find("\n## ").map_or(body.len(), |i| i + 1);
    let mut blocks = Vec::new();
    let mut cur: Option<Block> = None;
    let mut in_plain_fence = false;
    let mut heredoc: Option<String> = None;
    for (n, line) in body[..end].lines().enumerate() {
        let lineno = first_line + n + 1;
        if let Some(delim) = &heredoc {
            let b = cur.as_mut().expect("a here-document is inside a block");
            let cmd = b
                .cmds
                .last_mut()
                .expect("a here-document follows a command");
            cmd.push('\n');
            cmd.push_str(line);
            if line == delim {
                heredoc = None;
            }
            continue;
        }
        let t = line.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            if let Some(b) = cur.take() {
                assert!(
                    !b.cmds.is_empty(),
                    "docs/operator-guide.md line {}: an empty console block",
                    b.line
                );
                blocks.push(b);
            } else if in_plain_fence {
                in_plain_fence = false;
            } else {
                let mut words = info.split_whitespace();
                if words.next() == Some("console") {
                    let hosts: Vec<String> = words.map(str::to_string).collect();
                    assert!(
                        !hosts.is_empty(),
                        "docs/operator-guide.md line {lineno}: a console block of the \
                         multi-node section must name the hosts it runs on (```console node1)"
                    );
                    cur = Some(Block {
                        hosts,
                        cmds: Vec::new(),
                        line: lineno,
                    });
                } else {
                    in_plain_fence = true;
                }
            }
            continue;
        }
        if let Some(b) = cur.as_mut()
            && let Some(cmd) = t.strip_prefix("$ ")
        {
            let cmd = cmd.trim_end();
            assert!(
                !cmd.ends_with('\\'),
                "docs/operator-guide.md line {lineno}: continuation lines are not supported"
            );
            heredoc = heredoc_delimiter(cmd);
            b.cmds.push(cmd.to_string());
        }
    }
    assert!(
        cur.is_none() && !in_plain_fence && heredoc.is_none(),
        "docs/operator-guide.md: the multi-node section ends inside a block"
    );
    blocks
}

// ------------------------------------------------------------ loop devices

/// Loop devices this test attached, by the `host/drive` they stand for;
/// detached by name on drop (after the testbed, which kills what held them).
#[derive(Default)]
struct Loops(Vec<(String, String)>);

impl Loops {
    /// Attaches `file` as `label`; returns the device's `major:minor`.
    fn attach(&mut self, file: &Path, label: String) -> String {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup -f --show {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        self.0.push((label, dev.clone()));
        let name = dev.trim_start_matches("/dev/");
        let mm = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
            .unwrap_or_else(|e| panic!("cannot read the numbers of {dev}: {e}"));
        mm.trim().to_string()
    }

    /// The loop device standing for `label`.
    fn dev(&self, label: &str) -> &str {
        self.0
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, d)| d.as_str())
            .unwrap_or_else(|| panic!("no drive {label}"))
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for (_, dev) in &self.0 {
            let ok = Command::new("losetup")
                .args(["-d", dev])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("could not detach {dev}");
            }
        }
    }
}

// ---------------------------------------------------------------- sessions

/// One host's bash session.
struct Session {
    name: String,
    /// The host's directory: upper/ (its root's changes), run/, ...
    dir: PathBuf,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    seq: u64,
}

impl Session {
    fn start(host: &Host, dir: &Path, host_sh: &Path, devs: &str) -> Session {
        let mut child = Command::new("ip")
            .args(["netns", "exec", host.netns()])
            .args(["unshare", "--mount", "--uts", "--propagation", "private"])
            .arg("bash")
            .arg(host_sh)
            .arg(dir)
            .arg(host.name())
            .arg(devs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a host session");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Session {
            name: host.name().to_string(),
            dir: dir.to_path_buf(),
            child,
            stdin,
            lines,
            seq: 0,
        };
        let (rc, out) = s.run_quiet("exec 2>&1; hostname; id -un", Duration::from_secs(30));
        assert_eq!(
            (rc, out.split_whitespace().collect::<Vec<_>>()),
            (0, vec![host.name(), "root"]),
            "the session of {} did not start as root on a host of that name: {out}",
            host.name()
        );
        s
    }

    /// Runs `cmd` (its stdin /dev/null); returns its status and output.
    fn run_quiet(&mut self, cmd: &str, timeout: Duration) -> (i32, String) {
        self.seq += 1;
        let mark = format!("__multinode_guide_done_{}_{}", self.name, self.seq);
        let script = format!("{{ {cmd}\n}} </dev/null\nprintf '{mark} %d\\n' $?\n");
        self.stdin
            .write_all(script.as_bytes())
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("{}: the session is gone ({e})", self.name));
        let deadline = Instant::now() + timeout;
        let mut out: Vec<String> = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    // The mark ends the output, at the start of a line or
                    // after output with no newline at its end.
                    let (text, rc) = match line.find(&mark) {
                        Some(i) => (&line[..i], Some(&line[i + mark.len()..])),
                        None => (line.as_str(), None),
                    };
                    if rc.is_none() || !text.is_empty() {
                        println!("[{}] {text}", self.name);
                        out.push(text.to_string());
                    }
                    if let Some(rc) = rc {
                        let rc = rc.trim().parse().expect("a status");
                        return (rc, out.join("\n"));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "{}: `{cmd}` did not finish within {timeout:?}; its output:\n{}\n{}",
                    self.name,
                    out.join("\n"),
                    self.unit_logs()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "{}: the session ended during `{cmd}`; its output:\n{}",
                    self.name,
                    out.join("\n")
                ),
            }
        }
    }

    /// Runs a guide command, echoed.
    fn run(&mut self, cmd: &str) -> (i32, String, Duration) {
        for (i, line) in cmd.lines().enumerate() {
            println!("[{}] {} {line}", self.name, if i == 0 { "$" } else { ">" });
        }
        let t = Instant::now();
        let (rc, out) = self.run_quiet(cmd, COMMAND_TIMEOUT);
        (rc, out, t.elapsed())
    }

    /// The end of every unit's log on this host.
    fn unit_logs(&self) -> String {
        let dir = self.dir.join("upper/var/log/systemctl-shim");
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.sort();
        let mut s = String::new();
        for p in logs {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("--- {} on {} (end)\n", p.display(), self.name));
            for l in &lines[lines.len().saturating_sub(25)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// The pid of a running unit's main process (the stand-in's pid file).
    fn unit_pid(&self, unit: &str) -> u32 {
        let path = self
            .dir
            .join("run/systemctl-shim")
            .join(format!("{unit}.pid"));
        std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{}: {unit} is not running ({})", self.name, path.display()))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one command of a block did.
struct Ran {
    host: String,
    cmd: String,
    out: String,
}

/// Runs `block` on each of its hosts (at the same time when several),
/// each stopping at its first failing command; panics on a failure.
fn run_block(sessions: &mut [Session], block: &Block) -> Vec<Ran> {
    let mut mine: Vec<&mut Session> = sessions
        .iter_mut()
        .filter(|s| block.hosts.contains(&s.name))
        .collect();
    assert_eq!(
        mine.len(),
        block.hosts.len(),
        "docs/operator-guide.md line {}: the block names hosts {:?}; the test has {:?}",
        block.line,
        block.hosts,
        SERVERS
            .iter()
            .map(|s| s.0)
            .chain([CLIENT.0])
            .collect::<Vec<_>>()
    );
    let results: Vec<Result<Vec<Ran>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = mine
            .iter_mut()
            .map(|s| {
                scope.spawn(|| {
                    let mut ran = Vec::new();
                    for cmd in &block.cmds {
                        let (rc, out, took) = s.run(cmd);
                        if rc != 0 {
                            return Err(format!(
                                "docs/operator-guide.md line {}: on {}, `{cmd}` exited {rc} \
                                 after {took:.1?}; its output:\n{out}\n{}",
                                block.line,
                                s.name,
                                s.unit_logs()
                            ));
                        }
                        ran.push(Ran {
                            host: s.name.clone(),
                            cmd: cmd.clone(),
                            out,
                        });
                    }
                    Ok(ran)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        match r {
            Ok(ran) => all.extend(ran),
            Err(e) => panic!("{e}"),
        }
    }
    all
}

// ---------------------------------------------------------- the cluster

/// The cluster as the test looks at it, from the client host with the
/// binary under test.
#[derive(Clone)]
struct Cluster {
    client: Host,
    servers: Vec<Host>,
}

impl Cluster {
    fn cli(&self, args: &[&str]) -> String {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--etcd", ETCD]);
        let out = self.client.exec(PONTOON, &all);
        assert!(
            out.status.success(),
            "pontoon {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `pontoon ARGS --json`'s output, or `None` if it failed (an etcd
    /// member rebooting, say).
    fn try_json(&self, args: &[&str]) -> Option<Value> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--etcd", ETCD]);
        let out = self.client.exec(PONTOON, &all);
        if !out.status.success() {
            eprintln!(
                "(retrying) pontoon {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn json(&self, args: &[&str]) -> Value {
        let text = self.cli(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("pontoon {}: not JSON ({e}): {text}", args.join(" ")))
    }

    fn status(&self) -> Value {
        self.json(&["status", "--json"])
    }

    /// Each PG's acting set.
    fn acting(&self) -> Acting {
        acting_sets(&self.json(&["pg", "ls", "--json"]))
    }

    /// Waits until some PG's acting set holds `osd` (the manager has
    /// placed PGs on it), so that a clean status afterwards is its own.
    fn wait_placed_on(&self, osd: u32) {
        let t = Instant::now();
        while !self.acting().values().any(|set| set.contains(&osd)) {
            assert!(
                t.elapsed() < CLEAN_TIMEOUT,
                "no PG was placed on osd.{osd} within {CLEAN_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Each OSD's used bytes.
    fn used(&self) -> BTreeMap<u32, u64> {
        self.status()["osds"]["list"]
            .as_array()
            .expect("osds.list")
            .iter()
            .map(|o| {
                (
                    o["id"].as_u64().expect("id") as u32,
                    o["used_bytes"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Waits until every PG is active+clean and `up` OSDs are up; returns
    /// how long that took.
    fn wait_clean(&self, what: &str, up: u64) -> Duration {
        let t = Instant::now();
        let mut last = Value::Null;
        while t.elapsed() < CLEAN_TIMEOUT {
            let Some(s) = self.try_json(&["status", "--json"]) else {
                std::thread::sleep(Duration::from_millis(300));
                continue;
            };
            let total = s["pgs"]["total"].as_u64().unwrap_or(0);
            if total as usize == PGS
                && s["pgs"]["states"]["active+clean"].as_u64() == Some(total)
                && s["osds"]["up"].as_u64() == Some(up)
            {
                return t.elapsed();
            }
            last = s;
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!(
            "{what}: not clean with {up} OSDs up within {CLEAN_TIMEOUT:?}: osds {} pgs {}",
            last["osds"], last["pgs"]
        )
    }

    /// Each OSD's recovery bytes (and its pid, to see restarts), from the
    /// /metrics its registry entry names (on its host's loopback).
    fn recovery_bytes(&self) -> Scrape {
        let s = self.status();
        let mut out = BTreeMap::new();
        for d in s["daemons"].as_array().expect("daemons") {
            if d["kind"] != "osd" {
                continue;
            }
            let (Some(name), Some(host), Some(addr), Some(pid)) = (
                d["name"].as_str(),
                d["host"].as_str(),
                d["metrics"].as_str(),
                d["pid"].as_u64(),
            ) else {
                continue;
            };
            let Ok(id) = name.trim_start_matches("osd.").parse::<u32>() else {
                continue;
            };
            let Some(h) = self.servers.iter().find(|h| h.name() == host) else {
                continue;
            };
            let addr = addr.to_string();
            let body = h.in_netns(move || http_get(&addr, "/metrics"));
            let Some(body) = body else { continue };
            let bytes: f64 = body
                .lines()
                .filter(|l| l.starts_with("pontoon_osd_recovery_bytes_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            out.insert(id, (pid as u32, bytes as u64));
        }
        out
    }
}

/// Each PG's acting set, from `pg ls --json`.
fn acting_sets(pgs: &Value) -> Acting {
    pgs.as_array()
        .expect("pg ls --json prints an array")
        .iter()
        .map(|p| {
            let set = p["acting"]
                .as_array()
                .expect("acting")
                .iter()
                .map(|o| o.as_u64().expect("an OSD id") as u32)
                .collect();
            (p["pgid"].as_str().expect("pgid").to_string(), set)
        })
        .collect()
}

/// `GET path` from `addr`; the body, if it answered.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    Some(resp.split_once("\r\n\r\n")?.1.to_string())
}

/// Bytes recovery installed between two scrapes; an OSD whose pid changed
/// (restarted) counts from zero.
fn recovered_between(a: &Scrape, b: &Scrape) -> u64 {
    b.iter()
        .map(|(id, (pid, bytes))| match a.get(id) {
            Some((p0, b0)) if p0 == pid => bytes.saturating_sub(*b0),
            _ => *bytes,
        })
        .sum()
}

/// Sum of the increases of used bytes, and of the decreases.
fn used_change(a: &BTreeMap<u32, u64>, b: &BTreeMap<u32, u64>) -> (u64, u64) {
    let mut up = 0;
    let mut down = 0;
    for (id, after) in b {
        let before = a.get(id).copied().unwrap_or(0);
        up += after.saturating_sub(before);
        down += before.saturating_sub(*after);
    }
    (up, down)
}

/// PG replicas placed on an OSD that did not hold them before.
fn replicas_moved(a: &Acting, b: &Acting) -> usize {
    b.iter()
        .map(|(pg, set)| {
            a.get(pg)
                .map_or(set.len(), |old| set.difference(old).count())
        })
        .sum()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

// ------------------------------------------------------------------- fio

/// fio's arguments for the volume through the client's gateway.
fn fio_args(name: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        format!("--name={name}"),
        "--ioengine=nbd".into(),
        "--uri=nbd://127.0.0.1/vm1".into(),
        format!("--size={DATA}"),
        "--iodepth=8".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// fio writing the volume from the client host, every write read back.
struct Load {
    name: String,
    proc: pontoon_testbed::Proc,
    started: Instant,
}

impl Load {
    fn start(client: &Host, name: &str) -> Load {
        let args = fio_args(
            name,
            &[
                "--rw=randwrite",
                "--bs=64k",
                "--verify=crc32c",
                "--verify_backlog=64",
                "--verify_fatal=1",
                // No verify state file left in the working directory when
                // SIGINT stops it.
                "--verify_state_save=0",
                "--time_based",
                "--runtime=900",
                "--group_reporting",
            ],
        );
        let proc = client.spawn(&format!("fio-{name}"), "fio", &args);
        // Connected before the step starts.
        let t = Instant::now();
        while proc.log_count("connected to NBD server") == 0 {
            assert!(
                proc.is_running() && t.elapsed() < Duration::from_secs(20),
                "fio {name} did not connect:\n{}",
                proc.log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Load {
            name: name.to_string(),
            proc,
            started: Instant::now(),
        }
    }

    /// Stops it (SIGINT) and checks it saw no error; returns a summary.
    fn stop(self) -> String {
        let ran = self.started.elapsed();
        assert!(
            self.proc.is_running(),
            "fio {} stopped by itself:\n{}",
            self.name,
            self.proc.log_tail(40)
        );
        signal(self.proc.pid(), libc::SIGINT);
        self.proc
            .wait_exit(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("fio {} did not stop on SIGINT", self.name));
        let log = std::fs::read_to_string(self.proc.log_path()).unwrap_or_default();
        check_fio(&self.name, &log);
        let (verified, written) = log
            .lines()
            .find_map(|l| l.trim().strip_prefix("issued rwts: total="))
            .and_then(|r| {
                let mut n = r.split([',', ' ']).map(|x| x.parse::<u64>().unwrap_or(0));
                Some((n.next()?, n.next()?))
            })
            .unwrap_or((0, 0));
        format!(
            "fio {}: {:.1?}, {written} writes of 64 KiB, {verified} read back and verified, \
             0 errors, slowest write {:.2} s",
            self.name,
            ran,
            fio_max_write_latency(&log)
        )
    }
}

/// The longest write completion latency in fio's report, in seconds.
fn fio_max_write_latency(log: &str) -> f64 {
    let mut in_write = false;
    let mut worst: f64 = 0.0;
    for l in log.lines().map(str::trim) {
        if l.starts_with("write:") {
            in_write = true;
        } else if l.starts_with("read:") {
            in_write = false;
        }
        let Some(rest) = l.strip_prefix("clat (") else {
            continue;
        };
        if !in_write {
            continue;
        }
        let unit = match rest.get(..4) {
            Some("nsec") => 1e-9,
            Some("usec") => 1e-6,
            Some("msec") => 1e-3,
            _ => 1.0,
        };
        let Some(max) = rest.split("max=").nth(1).and_then(|m| m.split(',').next()) else {
            continue;
        };
        let (num, mult) = match max.strip_suffix('k') {
            Some(n) => (n, 1e3),
            None => (max, 1.0),
        };
        if let Ok(v) = num.trim().parse::<f64>() {
            worst = worst.max(v * mult * unit);
        }
    }
    worst
}

/// fio's output must show `err= 0` and no verification failure.
fn check_fio(name: &str, log: &str) {
    let errs: Vec<&str> = log
        .split("err=")
        .skip(1)
        .map(|rest| {
            let rest = rest.trim_start();
            &rest[..rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len())]
        })
        .collect();
    let bad = log
        .lines()
        .filter(|l| l.contains("verify") && (l.contains("bad") || l.contains("fail")))
        .count();
    assert!(
        !errs.is_empty() && errs.iter().all(|e| *e == "0") && bad == 0,
        "fio {name} reported errors (err= {errs:?}):\n{log}"
    );
}

// --------------------------------------------------- the rolling reboot

/// What the poller saw during the rolling reboot.
#[derive(Default)]
struct Watch {
    polls: usize,
    /// Polls whose commands failed (retried a second later).
    failed_polls: usize,
    polls_with_down: usize,
    violations: Vec<String>,
}

/// Polls PGs and OSDs every second until `stop`: no OSD out, and no PG on
/// an OSD it was not on in `base`.
fn watch_no_backfill(c: Cluster, base: Acting, stop: Arc<AtomicBool>, seen: Arc<Mutex<Watch>>) {
    while !stop.load(Ordering::Relaxed) {
        let (Some(osds), Some(pgs)) = (
            c.try_json(&["osd", "ls", "--json"]),
            c.try_json(&["pg", "ls", "--json"]),
        ) else {
            seen.lock().expect("watch").failed_polls += 1;
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        let acting = acting_sets(&pgs);
        let mut w = seen.lock().expect("watch");
        w.polls += 1;
        let mut down = false;
        for o in osds.as_array().expect("osd ls --json") {
            down |= o["up"] == false;
            if o["in"] == false && w.violations.len() < 20 {
                w.violations.push(format!("osd.{} went out", o["id"]));
            }
        }
        w.polls_with_down += usize::from(down);
        for (pg, set) in &acting {
            let extra: Vec<&u32> = set.difference(&base[pg]).collect();
            if !extra.is_empty() && w.violations.len() < 20 {
                w.violations.push(format!(
                    "pg {pg} placed on {extra:?} (its OSDs were {:?})",
                    base[pg]
                ));
            }
        }
        drop(w);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The poller thread; stopped and joined when finished or dropped (a
/// panic must not leave it polling hosts the testbed is deleting).
struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Poller {
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the poller");
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Step (a) in progress.
struct Reboots {
    seen: Arc<Mutex<Watch>>,
    poller: Poller,
    base: Acting,
    used: BTreeMap<u32, u64>,
    load: Load,
    started: Instant,
    recovered: u64,
    /// Taken before the reboot in progress.
    scrape: Scrape,
}

/// Step (b) in progress.
struct Failure {
    load: Load,
    failed: Instant,
    /// When the block with `osd replace` started, and the scrape then.
    replacing: Option<(Instant, Scrape)>,
}

/// Step (c) in progress.
struct Adding {
    load: Load,
    started: Instant,
    acting: Acting,
    used: BTreeMap<u32, u64>,
    scrape: Scrape,
    /// Once backfill made the cluster clean.
    placed: Option<(Acting, Scrape)>,
}

// ------------------------------------------------------------ the package

/// The package of the binary under test, built once per binary (cached
/// beside it, keyed by its size and time).
fn package() -> PathBuf {
    let bin = Path::new(PONTOON);
    let profile_dir = bin.parent().expect("the binary's directory");
    let profile = profile_dir
        .file_name()
        .expect("a profile directory")
        .to_string_lossy()
        .into_owned();
    let target = profile_dir.parent().expect("the target directory");
    let meta = std::fs::metadata(bin).expect("the binary");
    let stamp = format!(
        "{} {:?}",
        meta.len(),
        meta.modified().expect("the binary's time")
    );
    let cache = profile_dir.join("multinode-guide-deb");
    let debs = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "deb"))
                    .collect()
            })
            .unwrap_or_default()
    };
    if std::fs::read_to_string(cache.join("stamp")).ok().as_deref() == Some(stamp.as_str())
        && let [deb] = debs(&cache).as_slice()
    {
        return deb.clone();
    }
    let t = Instant::now();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = tempfile::tempdir_in(profile_dir).expect("a temporary directory");
    let out = Command::new(repo.join("scripts/build-deb.sh"))
        .args(["--profile", &profile, "--no-build", "--out"])
        .arg(tmp.path())
        .env("CARGO_TARGET_DIR", target)
        .current_dir(&repo)
        .output()
        .expect("run scripts/build-deb.sh");
    assert!(
        out.status.success(),
        "scripts/build-deb.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).expect("the package cache");
    let [deb] = debs(tmp.path())
        .try_into()
        .unwrap_or_else(|v: Vec<PathBuf>| panic!("build-deb.sh made {} packages: {v:?}", v.len()));
    let cached = cache.join(deb.file_name().expect("a file name"));
    std::fs::rename(&deb, &cached).expect("cache the package");
    std::fs::write(cache.join("stamp"), &stamp).expect("stamp the package");
    println!("built {} in {:.1?}", cached.display(), t.elapsed());
    cached
}

// ------------------------------------------------------------------ the test

/// Prints a figure for the closing note and keeps it.
fn note(figures: &mut Vec<String>, line: String) {
    println!("=== {line}");
    figures.push(line);
}

/// An OSD of `osd ls --json`.
fn osd(c: &Cluster, id: u64) -> Value {
    c.json(&["osd", "ls", "--json"])
        .as_array()
        .expect("osd ls --json prints an array")
        .iter()
        .find(|o| o["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Sets up the hosts: a testbed host each, with the guide's address, its
/// drives, its directory (the package, the stand-in) and its session.
fn hosts(tb: &Testbed, loops: &mut Loops, disks: &Path, deb: &Path) -> (Vec<Session>, Cluster) {
    let host_sh = tb.dir().join("host.sh");
    std::fs::write(&host_sh, HOST_SH).expect("write host.sh");
    let mut sessions = Vec::new();
    let mut hosts = Vec::new();
    let everyone =
        SERVERS
            .iter()
            .map(|(n, ip, d)| (*n, *ip, *d))
            .chain([(CLIENT.0, CLIENT.1, &[][..])]);
    for (name, ip, devs) in everyone {
        let host = tb.add_host(name);
        let out = Command::new("ip")
            .args(["-n", host.netns(), "addr", "add", &format!("{ip}/24")])
            .args(["dev", "eth0"])
            .output()
            .expect("run ip");
        assert!(out.status.success(), "ip addr add {ip}: {out:?}");
        let mut nodes = Vec::new();
        for dev in devs {
            let file = disks.join(format!("{name}-{dev}.img"));
            let f = std::fs::File::create(&file).expect("a drive file");
            f.set_len(parse_size(DRIVE_SIZE)).expect("size the drive");
            let mm = loops.attach(&file, format!("{name}/{dev}"));
            nodes.push(format!("{dev}={mm}"));
        }
        let dir = tb.dir().join("hosts").join(name);
        for d in [
            "upper/root",
            "upper/usr/local/sbin",
            "work",
            "root",
            "run/systemctl-shim",
        ] {
            std::fs::create_dir_all(dir.join(d)).expect("a host directory");
        }
        let deb_name = deb.file_name().expect("the package's name");
        std::fs::copy(deb, dir.join("upper/root").join(deb_name)).expect("copy the package");
        let shim = dir.join("upper/usr/local/sbin/systemctl");
        std::fs::write(&shim, SYSTEMCTL).expect("write the systemctl stand-in");
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))
            .expect("chmod the stand-in");
        std::fs::write(
            dir.join("run/systemctl-shim/reboot-downtime"),
            REBOOT_DOWNTIME.as_secs().to_string(),
        )
        .expect("write the downtime");
        sessions.push(Session::start(&host, &dir, &host_sh, &nodes.join(" ")));
        hosts.push(host);
    }
    let cluster = Cluster {
        client: hosts.pop().expect("the client"),
        servers: hosts,
    };
    (sessions, cluster)
}

#[test]
fn the_multi_node_section_of_the_operator_guide_works_under_load() {
    let t_test = Instant::now();
    let blocks = section_blocks(GUIDE);
    for (name, ip, _) in SERVERS {
        assert!(
            GUIDE.contains(&format!("| {name} | {ip} |")),
            "the guide's table no longer gives {name} the address {ip}"
        );
    }
    let deb = package();

    // Dropped in reverse order: the testbed (which kills every process of
    // its hosts), the loop devices, then their files.
    let disks = tempfile::tempdir().expect("a directory for the drives");
    let mut loops = Loops::default();
    let tb = Testbed::new("multinode-guide");
    let (mut sessions, cluster) = hosts(&tb, &mut loops, disks.path(), &deb);
    println!("hosts ready in {:.1?}", t_test.elapsed());

    let mut figures: Vec<String> = Vec::new();
    let mut steps: BTreeSet<&str> = BTreeSet::new();
    let mut reboots: Option<Reboots> = None;
    let mut failure: Option<Failure> = None;
    let mut adding: Option<Adding> = None;
    let t_guide = Instant::now();

    for block in &blocks {
        let ends_with_reboot = block.cmds.last().is_some_and(|c| c == "systemctl reboot");
        // ---- before the block
        if block.has("pontoon osd set norebalance") {
            steps.insert("reboots");
            note(
                &mut figures,
                format!(
                    "setup from the guide (install, etcd, managers, 5 OSDs, pool, volume, \
                     gateway): {:.1?}",
                    t_guide.elapsed()
                ),
            );
            let t = Instant::now();
            let out = cluster
                .client
                .exec("fio", fio_args("prefill", &["--rw=write", "--bs=1M"]));
            check_fio("prefill", &String::from_utf8_lossy(&out.stdout));
            note(
                &mut figures,
                format!("prefill: {DATA} written to vm1 in {:.1?}", t.elapsed()),
            );
        }
        if ends_with_reboot {
            let r = reboots.as_mut().expect("the reboots run under noout");
            r.scrape = cluster.recovery_bytes();
        }
        if block.has("pontoon osd unset norebalance") {
            let r = reboots.take().expect("the reboots ran");
            r.poller.finish();
            let moved = replicas_moved(&r.base, &cluster.acting());
            let (grew, shrank) = used_change(&r.used, &cluster.used());
            let w = r.seen.lock().expect("watch");
            assert!(
                w.violations.is_empty() && moved == 0,
                "the rolling reboot moved data: {:?}; {moved} PG replicas on other OSDs",
                w.violations
            );
            assert!(
                w.polls_with_down > 0,
                "the poller never saw an OSD down ({} polls)",
                w.polls
            );
            let load = r.load.stop();
            cluster.cli(&["config", "set", "out_after", "10m"]);
            note(
                &mut figures,
                format!(
                    "(a) rolling reboot of 3 hosts under noout: {:.1?}; backfill 0 (no PG on \
                     another OSD, no OSD out in {} polls, {} of them with OSDs down, {} failed, \
                     out-after {OUT_AFTER_DURING_REBOOTS}); recovery of the writes missed {}; used bytes \
                     +{} -{}; {load}",
                    r.started.elapsed(),
                    w.polls,
                    w.polls_with_down,
                    w.failed_polls,
                    mib(r.recovered),
                    mib(grew),
                    mib(shrank)
                ),
            );
        }
        if block.has("pontoon osd destroy") {
            steps.insert("failure");
            let load = Load::start(&cluster.client, "b");
            let node2 = sessions.iter().find(|s| s.name == "node2").expect("node2");
            let pid = node2.unit_pid("pontoon-osd@dev-nvme1n1.service");
            let reg = cluster.status()["daemons"]
                .as_array()
                .expect("daemons")
                .iter()
                .find(|d| d["kind"] == "osd" && d["pid"] == pid)
                .cloned()
                .unwrap_or(Value::Null);
            assert!(
                reg["name"]
                    .as_str()
                    .is_some_and(|n| n.trim_start_matches("osd.") == "3"),
                "node2's /dev/nvme1n1 (pid {pid}) is not osd.3: {reg}"
            );
            let failed = Instant::now();
            signal(pid, libc::SIGKILL);
            let dev = loops.dev("node2/nvme1n1");
            let out = Command::new("blkdiscard")
                .args(["-f", dev])
                .output()
                .expect("run blkdiscard");
            assert!(out.status.success(), "blkdiscard {dev}: {out:?}");
            while osd(&cluster, 3)["up"] != false {
                assert!(
                    failed.elapsed() < Duration::from_secs(60),
                    "osd.3 is not seen down"
                );
                std::thread::sleep(Duration::from_millis(300));
            }
            note(
                &mut figures,
                format!(
                    "(b) osd.3's drive failed (SIGKILL, {dev} discarded): down after {:.1?}",
                    failed.elapsed()
                ),
            );
            failure = Some(Failure {
                load,
                failed,
                replacing: None,
            });
        }
        if block.has("pontoon osd replace") {
            let f = failure.as_mut().expect("the drive failed");
            f.replacing = Some((Instant::now(), cluster.recovery_bytes()));
        }
        if block.hosts == ["node3"] && block.has("pontoon osd create --device /dev/nvme1n1") {
            steps.insert("adding");
            let load = Load::start(&cluster.client, "c");
            adding = Some(Adding {
                load,
                started: Instant::now(),
                acting: cluster.acting(),
                used: cluster.used(),
                scrape: cluster.recovery_bytes(),
                placed: None,
            });
        }

        let t_block = Instant::now();
        let ran = run_block(&mut sessions, block);
        let block_took = t_block.elapsed();

        // ---- after the block
        let output_of = |prefix: &str| -> String {
            ran.iter()
                .filter(|r| r.cmd.starts_with(prefix))
                .map(|r| format!("{}: {}", r.host, r.out))
                .collect::<Vec<_>>()
                .join("\n")
        };
        if block.hosts == ["node3"] && block.has("pontoon osd ls") {
            let ls = output_of("pontoon osd ls");
            let up = ls.lines().filter(|l| l.contains(" up ")).count();
            assert_eq!(
                up, 5,
                "node3's `pontoon osd ls` does not show 5 OSDs up:\n{ls}"
            );
        }
        if block.has("nbdinfo --list") {
            let list = output_of("nbdinfo --list");
            assert!(
                list.contains("export=\"vm1\""),
                "nbdinfo does not list vm1:\n{list}"
            );
            check_fio("first", &output_of("fio "));
        }
        if block.has("pontoon osd set norebalance") {
            cluster.wait_clean("before the reboots", 5);
            cluster.cli(&["config", "set", "out_after", OUT_AFTER_DURING_REBOOTS]);
            let base = cluster.acting();
            let stop = Arc::new(AtomicBool::new(false));
            let seen = Arc::new(Mutex::new(Watch::default()));
            let thread = {
                let (c, base, stop, seen) =
                    (cluster.clone(), base.clone(), stop.clone(), seen.clone());
                std::thread::spawn(move || watch_no_backfill(c, base, stop, seen))
            };
            let poller = Poller {
                stop,
                thread: Some(thread),
            };
            reboots = Some(Reboots {
                seen,
                poller,
                base,
                used: cluster.used(),
                load: Load::start(&cluster.client, "a"),
                started: Instant::now(),
                recovered: 0,
                scrape: BTreeMap::new(),
            });
        }
        if ends_with_reboot {
            let r = reboots.as_mut().expect("the reboots run under noout");
            let clean = cluster.wait_clean("after a reboot", 5);
            let now = cluster.recovery_bytes();
            let rec = recovered_between(&r.scrape, &now);
            r.recovered += rec;
            note(
                &mut figures,
                format!(
                    "(a) {} rebooted: its services down and up again in {block_took:.1?} \
                     ({REBOOT_DOWNTIME:?} down), clean {clean:.1?} later, recovery {}",
                    block.hosts.join(","),
                    mib(rec)
                ),
            );
        }
        if block.has("pontoon osd replace") {
            let Failure {
                load,
                failed,
                replacing,
            } = failure.take().expect("the drive failed");
            let (replacing, rec0) = replacing.expect("the replacement started");
            cluster.wait_placed_on(3);
            cluster.wait_clean("after osd replace", 5);
            let backfill = replacing.elapsed();
            let rec = recovered_between(&rec0, &cluster.recovery_bytes());
            let used3 = cluster.used().get(&3).copied().unwrap_or(0);
            let osd3 = osd(&cluster, 3);
            assert!(
                osd3["up"] == true && osd3["in"] == true && osd3["destroyed"] == false,
                "osd.3 is not back up and in: {osd3}"
            );
            let load = load.stop();
            note(
                &mut figures,
                format!(
                    "(b) replaced: `osd replace` and the unit's start took {block_took:.1?}, \
                     clean {backfill:.1?} after `osd replace` began (failure to clean \
                     {:.1?}); backfill installed {}, osd.3 holds {}; {load}",
                    failed.elapsed(),
                    mib(rec),
                    mib(used3)
                ),
            );
        }
        if block.hosts == ["node3"] && block.has("pontoon osd create --device /dev/nvme1n1") {
            let a = adding.as_mut().expect("adding");
            cluster.wait_placed_on(5);
            let backfill = cluster.wait_clean("after adding osd.5", 6);
            let acting = cluster.acting();
            let scrape = cluster.recovery_bytes();
            let moved = replicas_moved(&a.acting, &acting);
            note(
                &mut figures,
                format!(
                    "(c) osd.5 added on node3: backfilled to clean {backfill:.1?} after its \
                     unit started; {moved} PG replicas moved by placement, backfill installed {}",
                    mib(recovered_between(&a.scrape, &scrape))
                ),
            );
            a.placed = Some((acting, scrape));
        }
        if block.has("pontoon balancer on") {
            let a = adding.take().expect("osd.5 was added");
            let t = Instant::now();
            let (counts, worst) = loop {
                let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
                for set in cluster.acting().values() {
                    for o in set {
                        *counts.entry(*o).or_default() += 1;
                    }
                }
                let mean = counts.values().sum::<usize>() as f64 / counts.len() as f64;
                let worst = counts
                    .values()
                    .map(|c| (*c as f64 - mean).abs() / mean * 100.0)
                    .fold(0.0, f64::max);
                let eval = cluster.json(&["balancer", "eval", "--json"]);
                let eval_dev = eval["before"]["max_deviation_pct"]
                    .as_f64()
                    .unwrap_or(100.0);
                let s = cluster.status();
                let clean = s["pgs"]["states"]["active+clean"].as_u64() == Some(PGS as u64);
                if clean && counts.len() == 6 && worst <= 5.0 && eval_dev <= 5.0 {
                    break (counts, worst);
                }
                assert!(
                    t.elapsed() < BALANCE_TIMEOUT,
                    "the balancer did not bring every OSD within 5% of the mean in \
                     {BALANCE_TIMEOUT:?}: PGs per OSD {counts:?} (worst {worst:.1}%), balancer \
                     eval {eval_dev:.1}%\n{}",
                    cluster.cli(&["balancer", "status"])
                );
                std::thread::sleep(Duration::from_secs(1));
            };
            let (placed, scrape) = a.placed.as_ref().expect("osd.5 was backfilled");
            let acting = cluster.acting();
            let by_balancer = replicas_moved(placed, &acting);
            let rec = recovered_between(scrape, &cluster.recovery_bytes());
            let moved = replicas_moved(&a.acting, &acting);
            let (grew, shrank) = used_change(&a.used, &cluster.used());
            let load = a.load.stop();
            note(
                &mut figures,
                format!(
                    "(c) balanced {:.1?} after `balancer on`: PGs per OSD {counts:?}, worst \
                     {worst:.1}% from the mean; the balancer moved {by_balancer} PG replicas, \
                     backfill installed {}",
                    t.elapsed(),
                    mib(rec),
                ),
            );
            note(
                &mut figures,
                format!(
                    "(c) new drive to balanced: {:.1?}; {moved} PG replicas on other OSDs than \
                     before, used bytes +{} -{}; {load}",
                    a.started.elapsed(),
                    mib(grew),
                    mib(shrank)
                ),
            );
        }
    }
    for step in ["reboots", "failure", "adding"] {
        assert!(
            steps.contains(step),
            "the guide's maintenance part lost a step the test drives: {step}"
        );
    }
    assert!(
        reboots.is_none() && failure.is_none() && adding.is_none(),
        "a maintenance step did not end"
    );
    drop(sessions);
    let stops = unit_stops(tb.dir());
    note(&mut figures, stops);
    println!("\n=== figures (multi-node guide) ===");
    for f in &figures {
        println!("{f}");
    }
    println!(
        "guide {:.1?}, whole test {:.1?}",
        t_guide.elapsed(),
        t_test.elapsed()
    );
}

/// Every stop of a Pontoon unit must have ended with exit status 0 after
/// SIGTERM, within the unit's stop timeout, but the one OSD the test
/// killed; returns how long the stops took.
fn unit_stops(dir: &Path) -> String {
    let mut took: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut killed = Vec::new();
    for (name, _, _) in SERVERS {
        let logs = dir
            .join("hosts")
            .join(name)
            .join("upper/var/log/systemctl-shim");
        for entry in std::fs::read_dir(&logs).expect("the units' logs").flatten() {
            let unit = entry.file_name().to_string_lossy().into_owned();
            let kind = match unit.split(['@', '.']).next() {
                Some("pontoon-osd") => "OSD",
                Some("pontoon-mgr") => "manager",
                Some("etcd") => "etcd",
                _ => "other",
            };
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for l in text.lines().filter(|l| l.starts_with("-- ")) {
                if let Some(how) = l.split(": main process exited, ").nth(1) {
                    if how.contains("SIGKILL") {
                        killed.push(format!("{name} {unit}"));
                    } else if kind != "etcd" {
                        assert_eq!(how, "code=exited, status=0", "{name} {unit}: {l}");
                    }
                }
                if l.contains(": SIGTERM: ") {
                    assert!(l.contains(": stopped after "), "{name} {unit}: {l}");
                    let secs = l
                        .rsplit(" after ")
                        .next()
                        .and_then(|t| t.trim_end_matches(" s").parse::<f64>().ok());
                    took.entry(kind)
                        .or_default()
                        .push(secs.expect("a stop time"));
                }
            }
        }
    }
    assert_eq!(
        killed,
        ["node2 pontoon-osd@dev-nvme1n1.service.log"],
        "only the failed drive's OSD should have been killed"
    );
    let parts: Vec<String> = took
        .iter()
        .map(|(kind, t)| {
            format!(
                "{} {kind} stops, longest {:.2} s",
                t.len(),
                t.iter().copied().fold(0.0, f64::max)
            )
        })
        .collect();
    format!(
        "clean stops on SIGTERM (systemctl stop and reboot), every Pontoon daemon exited 0: {}",
        parts.join("; ")
    )
}

/// `2G`, `512M` in bytes.
fn parse_size(s: &str) -> u64 {
    let (n, unit) = s.split_at(s.len() - 1);
    let n: u64 = n.parse().expect("a size");
    n << match unit {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => panic!("size {s}"),
    }
}
