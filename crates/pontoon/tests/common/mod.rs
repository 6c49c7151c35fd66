//! Helpers the `pontoon` binary's integration tests share: running the
//! binary against a cluster directory with a time limit, and looking at the
//! processes a cluster runs.
#![allow(dead_code)]

pub mod nbd_raw;
pub mod qemu;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const PONTOON: &str = env!("CARGO_BIN_EXE_pontoon");
/// Longest one CLI command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `pontoon up` may take to be ready.
pub const WAIT: Duration = Duration::from_secs(60);

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    assert!(pid > 0);
    // SAFETY: kill on one positive pid.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The pid in a pid file.
pub fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A temporary directory whose path is canonical (no symlinks), for
/// comparing with paths the daemons print; removed when dropped.
pub fn tempdir(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    (tmp, dir)
}

/// Runs `pontoon ARGS --cluster DIR` (bounded), returning its output.
pub fn pontoon(dir: &Path, args: &[&str]) -> Output {
    pontoon_env(dir, args, &[])
}

/// [`pontoon`] with extra environment variables.
pub fn pontoon_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(PONTOON)
        .args(args)
        .arg("--cluster")
        .arg(dir)
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pontoon");
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("pontoon {args:?} took longer than {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = pontoon(dir, args);
    assert!(
        out.status.success(),
        "pontoon {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must fail with exit code `code`; returns its stderr.
pub fn fails(dir: &Path, args: &[&str], code: i32) -> String {
    let out = pontoon(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "pontoon {args:?}: {stderr}");
    stderr
}

/// Runs a command that must succeed and print JSON; returns it parsed.
pub fn json(dir: &Path, args: &[&str]) -> Value {
    let text = ok(dir, args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{args:?} printed bad JSON ({e}): {text}"))
}

/// Whether `pid` belongs to this test's cluster (not a reused pid): its
/// command line names the directory or, for a gateway, the cluster's etcd.
pub fn is_ours(pid: u32, dir: &Path, etcd: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains(&*dir.to_string_lossy()) || (!etcd.is_empty() && c.contains(etcd))
        })
        .unwrap_or(false)
}

/// Polls `pontoon ARGS --cluster DIR` (JSON output) until `pred` holds,
/// for at most `limit`; returns that output.
pub fn wait_json(
    dir: &Path,
    args: &[&str],
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let v = json(dir, args);
        if pred(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "`pontoon {args:?}` did not show {what} within {limit:?}; last: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Polls `status --json` until `pred` holds (for at most [`WAIT`]).
pub fn wait_status(dir: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_json(dir, &["status", "--json"], what, WAIT, pred)
}

/// OSD `id` in `pontoon df --json` output.
pub fn df_osd(df: &Value, id: u64) -> &Value {
    df["osds"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["id"] == id))
        .unwrap_or_else(|| panic!("osd.{id} not in df: {df:#}"))
}

/// Bytes OSD `id` holds, from `pontoon df --json` output.
pub fn df_used(df: &Value, id: u64) -> u64 {
    df_osd(df, id)["used_bytes"].as_u64().unwrap_or(u64::MAX)
}

/// Volume `name` in `pontoon df --json` output.
pub fn df_volume<'a>(df: &'a Value, name: &str) -> &'a Value {
    df["volumes"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("volume {name} not in df: {df:#}"))
}

/// The pid of a `pontoon up` cluster's OSD `id`, from its pid file.
pub fn osd_pid(dir: &Path, id: impl std::fmt::Display) -> u32 {
    read_pid(&dir.join(format!("run/osd.{id}.pid"))).expect("osd pid file")
}

/// The `--etcd-*` flags with which `pontoon up` starts its daemons of
/// kind `user` (`osd`, `mgr`, `nbd`, `nvmf`, `vhost`): etcd's CA, the
/// client certificate and the user's password file in `DIR/etcd-pki/`.
/// None for a cluster started with `--etcd-insecure`.
pub fn etcd_flags(dir: &Path, user: &str) -> Vec<String> {
    let toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap_or_default();
    if !toml.contains("etcd_user = ") {
        return Vec::new();
    }
    let pki = dir.join("etcd-pki");
    let f = |name: &str| pki.join(name).display().to_string();
    vec![
        "--etcd-ca-file".into(),
        f("ca.pem"),
        "--etcd-cert-file".into(),
        f("client.pem"),
        "--etcd-key-file".into(),
        f("client.key"),
        "--etcd-user".into(),
        user.into(),
        "--etcd-password-file".into(),
        f(&format!("{user}.password")),
    ]
}

/// The same credentials as the cluster crate takes them.
pub fn etcd_auth(dir: &Path, user: &str) -> pontoon_cluster::EtcdAuth {
    let flags = etcd_flags(dir, user);
    let get = |flag: &str| {
        flags
            .iter()
            .position(|f| f == flag)
            .map(|i| flags[i + 1].clone())
    };
    pontoon_cluster::EtcdAuth {
        ca_file: get("--etcd-ca-file").map(PathBuf::from),
        cert_file: get("--etcd-cert-file").map(PathBuf::from),
        key_file: get("--etcd-key-file").map(PathBuf::from),
        user: get("--etcd-user"),
        password: None,
        password_file: get("--etcd-password-file").map(PathBuf::from),
    }
}

/// A free loopback TCP port below Linux's ephemeral range (32768 up), so
/// the ports `pontoon up` picks for etcd cannot take it before the
/// gateway listens on it.
pub fn free_port() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    (0..1000)
        .map(|i| 20_000 + ((seed.wrapping_add(i * 7919)) % 12_000) as u16)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port in 20000..32000")
}

/// A running `pontoon up`; on drop (also on panic) it is stopped with
/// SIGTERM and whatever is left of the cluster is killed by pid.
pub struct Up {
    child: Option<Child>,
    dir: PathBuf,
}

impl Up {
    /// Starts a one-OSD cluster in `dir` with `extra` arguments; its
    /// stdout goes to `dir/up.out`.
    pub fn start(dir: &Path, extra: &[&str]) -> Up {
        Self::start_with(dir, 1, extra)
    }

    /// Like [`Up::start`], with `osds` OSDs.
    pub fn start_with(dir: &Path, osds: usize, extra: &[&str]) -> Up {
        Self::start_sized(dir, osds, "256M", extra)
    }

    /// Like [`Up::start_with`], with OSD files of `osd_size` each.
    pub fn start_sized(dir: &Path, osds: usize, osd_size: &str, extra: &[&str]) -> Up {
        let out = std::fs::File::create(dir.join("up.out")).expect("create up.out");
        let child = Command::new(PONTOON)
            .args(["up", "--dir"])
            .arg(dir)
            .args([
                "--osds",
                &osds.to_string(),
                "--osd-size",
                osd_size,
                "--shards",
                "1",
            ])
            .args(["--lease-ttl", "3s", "--out-after", "120s"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run pontoon up");
        let mut up = Up {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        up.wait_ready();
        up
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until cluster.toml names this `up` process (it is written
    /// once the cluster, gateways included, is ready).
    pub fn wait_ready(&mut self) {
        let file = self.dir.join("cluster.toml");
        let want = format!("pid = \"{}\"", self.pid());
        let deadline = Instant::now() + WAIT;
        loop {
            if std::fs::read_to_string(&file).is_ok_and(|t| t.contains(&want)) {
                return;
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("pontoon up exited before it was ready: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "pontoon up was not ready within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The etcd URL from cluster.toml (gateways are started with it).
    pub fn etcd(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("cluster.toml")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("etcd = \""))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_default()
            .to_string()
    }

    /// Stops `up` with SIGTERM and waits (bounded) for it to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("up is running");
        signal(child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = child.try_wait().expect("wait for up") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("pontoon up did not stop within 40 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every pid in the directory's pid files.
    pub fn pids(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("run")) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| read_pid(&e.path()))
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let pids = self.pids();
        let etcd = self.etcd();
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(25);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for pid in pids {
            if alive(pid) && is_ours(pid, &self.dir, &etcd) {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

/// HTTP GET of `path` at `addr` (HTTP/1.0, whole body); `None` on any failure.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// One fio round through the NBD gateway at `nbd` on volume `volume`:
/// writes 16 MiB at QD8 and reads it back verified (seed `seed`).
/// Returns (start, end, passed, report).
pub fn fio_nbd_round(nbd: &str, volume: &str, seed: u32) -> (Instant, Instant, bool, String) {
    let t = Instant::now();
    let r = pontoon_testtools::run(
        pontoon_testtools::fio().args([
            &format!("--name=honest{seed}"),
            "--ioengine=nbd",
            &format!("--uri=nbd://{nbd}/{volume}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=8",
            "--size=16M",
            "--verify=crc32c",
            "--verify_fatal=1",
            &format!("--randseed={seed}"),
        ]),
        Duration::from_secs(90),
    );
    (t, Instant::now(), r.success(), r.report())
}

/// Runs a command to completion; panics if it cannot start.
pub fn run_tool(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {shown}: {e} (scripts/deps.sh test installs the tools)"))
}

/// Runs a command that must succeed; returns its stdout.
pub fn must(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = run_tool(cmd);
    assert!(
        out.status.success(),
        "{shown} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `volume ls --json` without `used_bytes`, which moves on its own as
/// the OSDs report their space: what a refused command must not change.
pub fn volume_records(dir: &Path) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(&ok(dir, &["volume", "ls", "--json"])).expect("volume ls json");
    for rec in v.as_array_mut().expect("an array") {
        if let Some(o) = rec.as_object_mut() {
            o.remove("used_bytes");
        }
    }
    v
}

/// `snap ls VOLUME --json` without `exclusive_bytes`, which moves on its
/// own as the OSDs report their space: what a refused command must not
/// change.
pub fn snap_records(dir: &Path, volume: &str) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(&ok(dir, &["snap", "ls", volume, "--json"])).expect("snap ls json");
    for rec in v.as_array_mut().expect("an array") {
        if let Some(o) = rec.as_object_mut() {
            o.remove("exclusive_bytes");
        }
    }
    v
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Deep-scrubs pool `pool` and waits (at most `patience`) until every PG
/// reports a deep scrub that started after the request and none in
/// progress; returns `pg ls --json`'s rows then.
pub fn deep_scrub(dir: &Path, pool: &str, patience: Duration) -> Vec<Value> {
    let stamp = |p: &Value| p["scrub"]["last_deep_scrub_unix"].as_u64();
    let last = json(dir, &["pg", "ls", "--json"])
        .as_array()
        .and_then(|a| a.iter().filter_map(stamp).max())
        .unwrap_or(0);
    // So that a stamp at or after the request is a new scrub's.
    while unix_now() <= last {
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = unix_now();
    ok(dir, &["pool", "deep-scrub", pool]);
    let pgs = wait_json(
        dir,
        &["pg", "ls", "--json"],
        &format!("every PG of pool {pool} deep-scrubbed"),
        patience,
        |v| {
            v.as_array().is_some_and(|a| {
                !a.is_empty()
                    && a.iter().all(|p| {
                        stamp(p).is_some_and(|t| t >= asked) && p["scrub"]["progress"].is_null()
                    })
            })
        },
    );
    pgs.as_array().cloned().unwrap_or_default()
}
