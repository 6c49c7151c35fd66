//! The testbed (its switch, directory, faults and processes) and its hosts.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::netns::{self, Names};
use crate::nft::{self, Faults};
use crate::proc::{self, Proc};

/// Most hosts one testbed holds (`.1` to `.250` of its /24).
const MAX_HOSTS: usize = 250;
/// Lines of each log that [`Testbed::logs_tail`] shows.
const TAIL_LINES: usize = 40;
/// The bridge inside the switch namespace.
const BRIDGE: &str = "br0";
/// A host's interface inside its namespace.
const HOST_IF: &str = "eth0";

/// Locks a mutex, carrying on if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What hosts, faults and processes share.
pub(crate) struct Inner {
    /// Used in messages.
    pub hint: String,
    pub names: Names,
    /// The first three octets of the testbed's /24.
    pub subnet: [u8; 3],
    /// Data and logs; `None` once torn down.
    dir: Mutex<Option<tempfile::TempDir>>,
    path: PathBuf,
    hosts: Mutex<Vec<(String, Ipv4Addr)>>,
    faults: Mutex<Faults>,
    procs: Mutex<Vec<Proc>>,
    /// etcd endpoints once [`Testbed::start_etcd`] ran.
    pub etcd: Mutex<Option<String>>,
    /// Whether the root link was created (and so must be deleted).
    root_link_made: Mutex<bool>,
}

impl Inner {
    fn addr(&self, last: u8) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, last)
    }

    /// The testbed's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `log/<name>.log`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.path.join("log").join(format!("{name}.log"))
    }

    /// The end of every log, for panic messages.
    pub fn logs_tail(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.path.join("log"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.sort();
        let mut s = format!("testbed {} ({}):", self.hint, self.path.display());
        for p in logs {
            s.push_str(&format!("\n--- {} (end)\n", p.display()));
            s.push_str(&proc::tail(&p, TAIL_LINES));
        }
        s
    }

    /// Spawns `program args` in namespace `ns` (root if `None`) as process
    /// `name` of host `host`, its output appended to `log/<name>.log`.
    pub fn spawn(
        &self,
        ns: Option<&str>,
        host: &str,
        name: &str,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Proc {
        assert!(
            !name.is_empty() && !name.contains('/'),
            "process name {name:?} must be a plain file name"
        );
        let log = self.log_path(name);
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let mut cmd = Command::new(program);
        cmd.args(args);
        {
            use std::io::Write;
            writeln!(out, "=== testbed: starting on {host}: {cmd:?}")
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", log.display()));
        }
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = netns::spawn_in(ns, &mut cmd)
            .unwrap_or_else(|e| panic!("cannot start {cmd:?} on {host}: {e}"));
        let p = Proc::new(name, host, child, log);
        lock(&self.procs).push(p.clone());
        p
    }

    /// Kills every process, deletes namespaces and the root link, and the
    /// directory unless `PONTOON_TEST_KEEP` is set. Idempotent.
    fn teardown(&self) {
        for p in std::mem::take(&mut *lock(&self.procs)) {
            p.kill_quietly();
        }
        for (name, _) in std::mem::take(&mut *lock(&self.hosts)) {
            netns::delete_ns(&self.names.host_ns(&name));
        }
        netns::delete_ns(&self.names.switch_ns());
        if std::mem::take(&mut *lock(&self.root_link_made))
            && Path::new("/sys/class/net")
                .join(&self.names.root_link)
                .exists()
        {
            netns::ip_quiet(&["link", "del", &self.names.root_link]);
        }
        if let Some(dir) = lock(&self.dir).take() {
            if std::env::var_os("PONTOON_TEST_KEEP").is_some() {
                eprintln!(
                    "PONTOON_TEST_KEEP: testbed {} keeps {}",
                    self.hint,
                    dir.keep().display()
                );
            } else if let Err(e) = dir.close() {
                eprintln!("testbed {}: cannot remove its directory: {e}", self.hint);
            }
        }
    }
}

/// Something at one end of a link: a [`Host`], or the test process
/// ([`TestNode`]).
pub trait Node {
    /// Its address on the testbed's network.
    fn ip(&self) -> Ipv4Addr;
    /// Its name, for messages.
    fn label(&self) -> String;
}

/// The test process itself, as an end of links (it holds `.254`).
#[derive(Clone, Copy, Debug)]
pub struct TestNode {
    ip: Ipv4Addr,
}

impl Node for TestNode {
    fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    fn label(&self) -> String {
        "test".into()
    }
}

/// A host: a network namespace with one interface on the testbed's switch.
/// Clones are handles on the same host.
#[derive(Clone)]
pub struct Host {
    name: String,
    ns: String,
    ip: Ipv4Addr,
    tb: Arc<Inner>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("netns", &self.ns)
            .finish()
    }
}

impl Node for Host {
    fn ip(&self) -> Ipv4Addr {
        self.ip
    }
    fn label(&self) -> String {
        self.name.clone()
    }
}

impl Host {
    /// Its name (also what OSDs on it register as their host).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its address on the testbed's network.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// Its network namespace (`ip netns exec NETNS ...` works on it).
    pub fn netns(&self) -> &str {
        &self.ns
    }

    /// Starts `program args` in this host as process `name` (unique in the
    /// testbed: it names the log, `log/<name>.log`, appended to). The pid
    /// is the program's own. It is SIGKILLed if the spawning thread dies,
    /// and by the testbed's drop.
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        name: &str,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Proc {
        self.tb
            .spawn(Some(&self.ns), &self.name, name, program, args)
    }

    /// Runs `program args` in this host to completion; returns its output
    /// whatever its status.
    pub fn exec<S: AsRef<OsStr>>(
        &self,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Output {
        netns::output_in(Some(&self.ns), Command::new(program).args(args), None)
    }

    /// Runs `f` on a fresh thread inside this host's network namespace:
    /// sockets it opens belong to the host (and stay so when used later
    /// from other threads).
    pub fn in_netns<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        netns::run_in(&self.ns, f)
    }
}

/// A private network of hosts on one machine, with link faults between
/// them, and the processes started in them. Everything is removed on drop.
pub struct Testbed {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Testbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("hint", &self.inner.hint)
            .field("netns", &self.inner.names.switch_ns())
            .field("subnet", &self.subnet())
            .finish()
    }
}

impl Testbed {
    /// Creates an empty testbed: a switch namespace with a bridge, a /24 of
    /// its own (unique on the machine), the test process on `.254`, no
    /// faults, and a temporary directory (`name_hint` names it). Removes
    /// leftovers of testbeds of dead processes first.
    pub fn new(name_hint: &str) -> Testbed {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "a testbed needs root (network namespaces, veth, nftables)"
        );
        netns::clean_leftovers_once();
        let clean_hint: String = name_hint
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("pontoon-testbed-{clean_hint}-"))
            .tempdir()
            .expect("cannot create the testbed's temporary directory");
        let path = dir.path().to_path_buf();
        std::fs::create_dir_all(path.join("log")).expect("cannot create the log directory");
        let names = Names::fresh();
        let machine = netns::MachineLock::take();
        let subnet = netns::pick_subnet(&names);
        let tb = Testbed {
            inner: Arc::new(Inner {
                hint: name_hint.to_string(),
                names: names.clone(),
                subnet,
                dir: Mutex::new(Some(dir)),
                path,
                hosts: Mutex::new(Vec::new()),
                faults: Mutex::new(Faults::default()),
                procs: Mutex::new(Vec::new()),
                etcd: Mutex::new(None),
                root_link_made: Mutex::new(false),
            }),
        };
        // A panic from here on drops `tb`, which removes what was made.
        let sw = names.switch_ns();
        let ip_sw = |args: &[&str]| {
            let mut all = vec!["-n", sw.as_str()];
            all.extend_from_slice(args);
            netns::ip(&all)
        };
        netns::ip(&["netns", "add", &sw]);
        ip_sw(&["link", "set", "lo", "up"]);
        ip_sw(&["link", "add", BRIDGE, "type", "bridge"]);
        ip_sw(&["link", "set", BRIDGE, "up"]);
        *lock(&tb.inner.root_link_made) = true;
        netns::ip(&[
            "link",
            "add",
            &names.root_link,
            "type",
            "veth",
            "peer",
            "name",
            "root",
            "netns",
            &sw,
        ]);
        ip_sw(&["link", "set", "root", "master", BRIDGE, "up"]);
        let cidr = format!("{}/24", tb.inner.addr(254));
        netns::ip(&["addr", "add", &cidr, "dev", &names.root_link]);
        netns::ip(&["link", "set", &names.root_link, "up"]);
        netns::wait_link_ready(None, &names.root_link, false);
        netns::wait_link_ready(Some(&sw), "root", true);
        // The /24 is claimed (routed in the root namespace) from here on.
        drop(machine);
        tb.apply_faults(&Faults::default());
        tb
    }

    /// Where its data and logs are (`log/<name>.log`).
    pub fn dir(&self) -> &Path {
        self.inner.path()
    }

    /// The testbed's /24, e.g. `10.77.12.0/24`.
    pub fn subnet(&self) -> String {
        format!("{}/24", self.inner.addr(0))
    }

    /// The test process's address on the testbed's network (`.254`).
    pub fn test_ip(&self) -> Ipv4Addr {
        self.inner.addr(254)
    }

    /// The test process as an end of links, for [`Testbed::cut`] and friends.
    pub fn test_node(&self) -> TestNode {
        TestNode { ip: self.test_ip() }
    }

    /// The switch's network namespace (holds the bridge and the fault rules).
    pub fn switch_netns(&self) -> String {
        self.inner.names.switch_ns()
    }

    /// Adds host `name` (1-12 characters of `[a-z0-9]`, unique in the
    /// testbed): a namespace with loopback up and one interface on the
    /// switch, with the next address of the /24.
    pub fn add_host(&self, name: &str) -> Host {
        assert!(
            (1..=12).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "host name {name:?} must be 1-12 characters of [a-z0-9]"
        );
        let (index, ip) = {
            let mut hosts = lock(&self.inner.hosts);
            assert!(
                hosts.iter().all(|(n, _)| n != name),
                "host {name} already exists"
            );
            assert!(hosts.len() < MAX_HOSTS, "at most {MAX_HOSTS} hosts");
            let index = hosts.len();
            let ip = self.inner.addr(index as u8 + 1);
            // Registered before creation so that drop deletes a half-made one.
            hosts.push((name.to_string(), ip));
            (index, ip)
        };
        let ns = self.inner.names.host_ns(name);
        let sw = self.inner.names.switch_ns();
        let port = format!("h{index}");
        let cidr = format!("{ip}/24");
        netns::ip(&["netns", "add", &ns]);
        netns::ip(&["-n", &ns, "link", "set", "lo", "up"]);
        netns::ip(&[
            "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", HOST_IF, "netns", &ns,
        ]);
        netns::ip(&["-n", &sw, "link", "set", &port, "master", BRIDGE, "up"]);
        netns::ip(&["-n", &ns, "addr", "add", &cidr, "dev", HOST_IF]);
        netns::ip(&["-n", &ns, "link", "set", HOST_IF, "up"]);
        netns::wait_link_ready(Some(&ns), HOST_IF, false);
        netns::wait_link_ready(Some(&sw), &port, true);
        Host {
            name: name.to_string(),
            ns,
            ip,
            tb: self.inner.clone(),
        }
    }

    /// Starts `program args` in the root namespace (the test's own) as
    /// process `name`, like [`Host::spawn`].
    pub fn spawn_local<S: AsRef<OsStr>>(
        &self,
        name: &str,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Proc {
        self.inner.spawn(None, "test", name, program, args)
    }

    /// Every process started so far (exited ones included).
    pub fn procs(&self) -> Vec<Proc> {
        lock(&self.inner.procs).clone()
    }

    /// `log/<name>.log`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.inner.log_path(name)
    }

    /// Every log file, sorted.
    pub fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir().join("log"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.sort();
        logs
    }

    /// The last lines of every log, for assertion messages.
    pub fn logs_tail(&self) -> String {
        self.inner.logs_tail()
    }

    /// How many lines of `log/<name>.log` contain `pattern`.
    pub fn log_count(&self, name: &str, pattern: &str) -> usize {
        proc::count_lines(&self.log_path(name), pattern)
    }

    // ---- link faults ----

    fn apply_faults(&self, f: &Faults) {
        f.apply(&self.inner.names.switch_ns());
    }

    /// Changes the faults in force and installs the result.
    fn change_faults(&self, change: impl FnOnce(&mut Faults)) {
        let mut faults = lock(&self.inner.faults);
        change(&mut faults);
        self.apply_faults(&faults);
    }

    /// Drops every packet between `a` and `b`, both ways, established
    /// connections included.
    pub fn cut(&self, a: &dyn Node, b: &dyn Node) {
        let (a, b) = (a.ip(), b.ip());
        self.change_faults(|f| {
            f.one_way.insert((a, b));
            f.one_way.insert((b, a));
        });
    }

    /// Drops packets from `from` to `to`; those from `to` to `from` still
    /// arrive (so TCP to either side stalls, but datagrams get through one way).
    pub fn cut_one_way(&self, from: &dyn Node, to: &dyn Node) {
        let (from, to) = (from.ip(), to.ip());
        self.change_faults(|f| {
            f.one_way.insert((from, to));
        });
    }

    /// Ends the cuts between `a` and `b`, both directions (isolation stays).
    pub fn heal(&self, a: &dyn Node, b: &dyn Node) {
        let (a, b) = (a.ip(), b.ip());
        self.change_faults(|f| {
            f.one_way.remove(&(a, b));
            f.one_way.remove(&(b, a));
        });
    }

    /// Ends the cut from `from` to `to` only.
    pub fn heal_one_way(&self, from: &dyn Node, to: &dyn Node) {
        let (from, to) = (from.ip(), to.ip());
        self.change_faults(|f| {
            f.one_way.remove(&(from, to));
        });
    }

    /// Cuts every node of `left` from every node of `right`, both ways.
    pub fn partition(&self, left: &[&dyn Node], right: &[&dyn Node]) {
        self.change_faults(|f| {
            for a in left {
                for b in right {
                    f.one_way.insert((a.ip(), b.ip()));
                    f.one_way.insert((b.ip(), a.ip()));
                }
            }
        });
    }

    /// Cuts `host` from everything: every other host and the test process.
    pub fn isolate(&self, host: &dyn Node) {
        let ip = host.ip();
        self.change_faults(|f| {
            f.isolated.insert(ip);
        });
    }

    /// Ends [`Testbed::isolate`] of `host` (cuts made otherwise stay).
    pub fn unisolate(&self, host: &dyn Node) {
        let ip = host.ip();
        self.change_faults(|f| {
            f.isolated.remove(&ip);
        });
    }

    /// Cuts `host` from the test process, both ways.
    pub fn cut_from_test(&self, host: &dyn Node) {
        self.cut(host, &self.test_node());
    }

    /// Ends the cuts between `host` and the test process.
    pub fn heal_from_test(&self, host: &dyn Node) {
        self.heal(host, &self.test_node());
    }

    /// Ends every cut and isolation.
    pub fn heal_all(&self) {
        self.change_faults(|f| *f = Faults::default());
    }

    /// Describes the faults in force (the nft script), for messages.
    pub fn faults(&self) -> String {
        lock(&self.inner.faults).script()
    }

    /// Packets the fault rules dropped since the faults last changed.
    pub fn dropped_packets(&self) -> u64 {
        nft::dropped_packets(&self.inner.names.switch_ns())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("testbed dropped by a panic; {}", self.inner.logs_tail());
        }
        self.inner.teardown();
    }
}
