//! Network namespaces and links: the names a testbed gives them (unique
//! across processes), the /24 it picks, running `ip` and other programs
//! inside a namespace, and the clean-up of testbeds whose process died.
//!
//! Names: a testbed's tag is `pt-<pid>-<n>` (`n` counts testbeds in this
//! process). Its switch namespace is the tag itself, a host's namespace is
//! `<tag>-<host>`, and the one link in the root namespace is
//! `pt<pid>x<n>` (at most 15 characters). Every other interface lives
//! inside a testbed namespace, where its name only has to be unique there.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where `ip netns add` puts its namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Serializes subnet choice and leftover clean-up across processes.
const LOCK_FILE: &str = "/run/pontoon-testbed.lock";
/// Testbed subnets are `10.<a>.<b>.0/24` with `a` in this range.
const SECOND_OCTETS: std::ops::RangeInclusive<u8> = 64..=127;

/// How long a new link may take to come up.
const LINK_TIMEOUT: Duration = Duration::from_secs(10);
/// Testbeds created by this process so far.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The names of one testbed's namespaces and root link.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    /// `pt-<pid>-<n>`: the switch namespace, and the prefix of host ones.
    pub tag: String,
    /// `pt<pid>x<n>`: the veth end in the root namespace.
    pub root_link: String,
}

impl Names {
    /// Fresh names for a new testbed of this process.
    pub fn fresh() -> Names {
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed) % 100_000;
        let root_link = format!("pt{pid}x{n}");
        assert!(
            root_link.len() <= 15,
            "interface name {root_link} is too long"
        );
        Names {
            tag: format!("pt-{pid}-{n}"),
            root_link,
        }
    }

    /// The switch namespace.
    pub fn switch_ns(&self) -> String {
        self.tag.clone()
    }

    /// The namespace of host `host`.
    pub fn host_ns(&self, host: &str) -> String {
        format!("{}-{host}", self.tag)
    }
}

/// Path of a named namespace.
pub(crate) fn ns_path(ns: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(ns)
}

/// Opens a named namespace, for `setns`.
fn open_ns(ns: &str) -> File {
    File::open(ns_path(ns)).unwrap_or_else(|e| {
        panic!(
            "cannot open network namespace {ns} ({}): {e}",
            ns_path(ns).display()
        )
    })
}

/// Makes `cmd` enter network namespace `ns` (if any) between fork and exec,
/// and die with SIGKILL when the thread that spawns it exits. Returns the
/// namespace file, which must stay open until the command is spawned.
fn prepare(cmd: &mut Command, ns: Option<&str>, pdeathsig: bool) -> Option<File> {
    let file = ns.map(open_ns);
    let fd = file.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: only async-signal-safe calls (setns, prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if pdeathsig && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = fd
                && libc::setns(fd, libc::CLONE_NEWNET) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    file
}

/// Spawns `cmd` inside namespace `ns` (the root namespace if `None`); it
/// gets SIGKILL when the spawning thread exits.
pub(crate) fn spawn_in(ns: Option<&str>, cmd: &mut Command) -> std::io::Result<Child> {
    let _file = prepare(cmd, ns, true);
    cmd.spawn()
}

/// Runs `cmd` to completion inside namespace `ns` (the root namespace if
/// `None`), feeding it `stdin`; returns its output whatever its status.
pub(crate) fn output_in(ns: Option<&str>, cmd: &mut Command, stdin: Option<&str>) -> Output {
    let _file = prepare(cmd, ns, true);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("cannot feed {what}: {e}"));
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for {what}: {e}"))
}

/// Runs `cmd` (in `ns`), which must succeed; returns its stdout.
pub(crate) fn must(ns: Option<&str>, cmd: &mut Command, stdin: Option<&str>) -> String {
    let what = format!("{cmd:?}");
    let out = output_in(ns, cmd, stdin);
    assert!(
        out.status.success(),
        "{what}{} failed ({}): {}{}",
        ns.map(|n| format!(" in namespace {n}")).unwrap_or_default(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ip ARGS` in the root namespace, which must succeed.
pub(crate) fn ip(args: &[&str]) -> String {
    must(None, Command::new("ip").args(args), None)
}

/// Runs `ip ARGS`, ignoring failure (clean-up of what may be gone).
pub(crate) fn ip_quiet(args: &[&str]) {
    let _ = output_in(None, Command::new("ip").args(args), None);
}

/// Waits until link `dev` (in namespace `ns`, or the root one) is
/// operationally up and, for a bridge port, forwarding. Until the kernel
/// has processed the carrier change a new link drops what it is given, so
/// the first packets of a test would be lost.
pub(crate) fn wait_link_ready(ns: Option<&str>, dev: &str, bridge_port: bool) {
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-d", "-o", "link", "show", dev]);
    let deadline = Instant::now() + LINK_TIMEOUT;
    loop {
        let out = ip(&args);
        let states: Vec<&str> = out
            .split(" state ")
            .skip(1)
            .filter_map(|s| s.split_whitespace().next())
            .collect();
        let up = states.first() == Some(&"UP");
        let forwarding = !bridge_port || states.contains(&"forwarding");
        if up && forwarding {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "link {dev}{} is not ready after {LINK_TIMEOUT:?}: {out}",
            ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` on a new thread inside network namespace `ns` and returns what
/// it returns. Sockets it creates stay in that namespace wherever they are
/// used afterwards.
pub(crate) fn run_in<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let file = open_ns(ns);
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on this thread only (network namespaces are per thread).
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                r,
                0,
                "cannot enter network namespace {ns}: {}",
                std::io::Error::last_os_error()
            );
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// An exclusive lock shared by every testbed on the machine, released on drop.
pub(crate) struct MachineLock(#[allow(dead_code)] File);

impl MachineLock {
    /// Takes the lock, waiting for other processes to release it.
    pub fn take() -> MachineLock {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_FILE)
            .unwrap_or_else(|e| panic!("cannot open {LOCK_FILE}: {e}"));
        // SAFETY: flock on a descriptor we own.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(
            r,
            0,
            "cannot lock {LOCK_FILE}: {}",
            std::io::Error::last_os_error()
        );
        MachineLock(f)
    }
}

/// Whether process `pid` exists and is not a zombie (a killed test
/// process may wait a while for its reaper).
fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X"))
}

/// The pid embedded in a testbed name (`pt-<pid>-...` or `pt<pid>x<n>`).
fn owner_pid(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix("pt-") {
        return rest.split('-').next()?.parse().ok();
    }
    let rest = name.strip_prefix("pt")?;
    let (pid, n) = rest.split_once('x')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// Kills every process in namespace `ns` and deletes it.
pub(crate) fn delete_ns(ns: &str) {
    let out = output_in(None, Command::new("ip").args(["netns", "pids", ns]), None);
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>() {
            // SAFETY: plain kill(2) of a process inside a testbed namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    ip_quiet(&["netns", "del", ns]);
}

/// Deletes what testbeds of dead processes left behind: their namespaces
/// (with any process still in them) and root links. Once per process,
/// under the machine lock.
pub(crate) fn clean_leftovers_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _lock = MachineLock::take();
        let dead = |name: &str| owner_pid(name).is_some_and(|p| !pid_alive(p));
        if let Ok(dir) = std::fs::read_dir(NETNS_DIR) {
            let mut names: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("pt-") && dead(n))
                .collect();
            names.sort();
            for ns in names {
                eprintln!("testbed: deleting leftover network namespace {ns}");
                delete_ns(&ns);
            }
        }
        for link in root_links() {
            if link.starts_with("pt") && dead(&link) {
                eprintln!("testbed: deleting leftover link {link}");
                ip_quiet(&["link", "del", &link]);
            }
        }
    });
}

/// Names of the links of the root namespace.
fn root_links() -> Vec<String> {
    ip(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

/// An IPv4 prefix.
#[derive(Clone, Copy, Debug)]
struct Prefix {
    addr: u32,
    len: u32,
}

impl Prefix {
    fn parse(s: &str) -> Option<Prefix> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, l.parse().ok()?),
            None => (s, 32),
        };
        let addr: Ipv4Addr = a.parse().ok()?;
        (len <= 32).then_some(Prefix {
            addr: addr.into(),
            len,
        })
    }

    fn overlaps(&self, other: &Prefix) -> bool {
        let len = self.len.min(other.len);
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        self.addr & mask == other.addr & mask
    }
}

/// Every IPv4 address or prefix the root namespace routes or holds
/// (over-approximated: any address-looking word of `ip route` / `ip addr`).
fn taken_prefixes() -> Vec<Prefix> {
    let routes = ip(&["-4", "route", "show", "table", "all"]);
    let addrs = ip(&["-4", "-o", "addr", "show"]);
    routes
        .split_whitespace()
        .chain(addrs.split_whitespace())
        .filter_map(Prefix::parse)
        .collect()
}

/// Picks a /24 no route or address of the root namespace overlaps,
/// starting from a spot derived from the tag. Call under [`MachineLock`]
/// and claim it (address the root link) before releasing the lock.
pub(crate) fn pick_subnet(names: &Names) -> [u8; 3] {
    let taken = taken_prefixes();
    let span = (*SECOND_OCTETS.end() as u32 - *SECOND_OCTETS.start() as u32 + 1) * 256;
    let seed = names.tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    for i in 0..span {
        let k = ((seed % span as u64) as u32 + i) % span;
        let a = *SECOND_OCTETS.start() + (k / 256) as u8;
        let b = (k % 256) as u8;
        let net = Prefix {
            addr: u32::from(Ipv4Addr::new(10, a, b, 0)),
            len: 24,
        };
        if !taken.iter().any(|t| t.overlaps(&net)) {
            return [10, a, b];
        }
    }
    panic!(
        "no free /24 in 10.{}-{}.x.0 for a testbed: the root namespace routes them all",
        SECOND_OCTETS.start(),
        SECOND_OCTETS.end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pids_parse_from_both_name_forms() {
        assert_eq!(owner_pid("pt-1234-7"), Some(1234));
        assert_eq!(owner_pid("pt-1234-7-o1"), Some(1234));
        assert_eq!(owner_pid("pt1234x7"), Some(1234));
        assert_eq!(owner_pid("ptx"), None);
        assert_eq!(owner_pid("eth0"), None);
    }

    #[test]
    fn prefixes_overlap_by_their_shorter_length() {
        let p = |s| Prefix::parse(s).expect("prefix");
        assert!(p("10.0.0.0/8").overlaps(&p("10.64.3.0/24")));
        assert!(p("10.64.3.7").overlaps(&p("10.64.3.0/24")));
        assert!(!p("10.64.4.0/24").overlaps(&p("10.64.3.0/24")));
        assert!(p("0.0.0.0/0").overlaps(&p("10.64.3.0/24")));
        assert!(Prefix::parse("default").is_none());
    }

    #[test]
    fn names_fit_in_interface_names() {
        let n = Names::fresh();
        assert!(n.root_link.len() <= 15);
        assert_eq!(owner_pid(&n.root_link), Some(std::process::id()));
        assert_eq!(owner_pid(&n.host_ns("o1")), Some(std::process::id()));
    }
}
