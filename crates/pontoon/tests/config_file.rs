//! The node configuration file (`/etc/pontoon/pontoon.toml`, `--config`,
//! `$PONTOON_CONFIG`) through the built binary:
//! - `config show` prints every setting with where it came from, and
//!   flag > environment > file > default;
//! - a bad file is refused by every command with one line naming the
//!   file and the line;
//! - the daemons take their settings from it: an OSD whose etcd, cluster
//!   name, listen address and shard port range come from the file binds
//!   its shards in that range (skipping a taken port), logs JSON when the
//!   file says so, tells systemd it is ready (`READY=1` on
//!   `$NOTIFY_SOCKET`), and exits 0 soon after SIGTERM; so do the manager
//!   and the NBD and NVMe/TCP gateways.
//!
//! Needs etcd-server (scripts/deps.sh).

mod common;

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{PONTOON, alive, signal};
use pontoon_cluster::testkit::EtcdServer;
use serde_json::Value;

/// Longest a daemon may take to notify readiness.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a daemon may take to exit after SIGTERM (the units allow 30 s
/// to 60 s).
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// `pontoon ARGS` with a clean environment for the settings (none of the
/// caller's PONTOON_* variables) plus `env`.
fn pontoon_cmd(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(PONTOON);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("PONTOON_") || k == "NOTIFY_SOCKET" {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c.stdin(Stdio::null());
    c
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    pontoon_cmd(args, env)
        .output()
        .unwrap_or_else(|e| panic!("running pontoon {args:?}: {e}"))
}

/// `config show --json` → key → (value, source, origin).
fn show(args: &[&str], env: &[(&str, &str)]) -> (Value, BTreeMap<String, (Value, String, Value)>) {
    let mut all = vec!["config", "show", "--json"];
    all.extend_from_slice(args);
    let out = run(&all, env);
    assert!(
        out.status.success(),
        "config show {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("config show --json prints JSON");
    let map = v["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap().to_string(),
                (
                    s["value"].clone(),
                    s["source"].as_str().unwrap().to_string(),
                    s["origin"].clone(),
                ),
            )
        })
        .collect();
    (v, map)
}

#[test]
fn config_show_tells_where_each_setting_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pontoon.toml");
    std::fs::write(
        &file,
        r#"cluster_name = "from-file"
[etcd]
endpoints = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
[osd]
listen = "10.0.0.11"
shard_ports = "6800-7300"
[nbd]
listen = "0.0.0.0:10809"
[osd.journal]
"/dev/nvme0n1" = "/dev/nvme2n1p1"
"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (v, s) = show(
        &["--config", f, "--cluster-name", "from-flag"],
        &[("PONTOON_OSD_LISTEN", "10.0.0.12")],
    );
    assert_eq!(v["config_file"]["path"], f);
    assert_eq!(v["config_file"]["chosen_by"], "flag --config");
    assert_eq!(v["config_file"]["loaded"], true);
    let is = |key: &str, value: &str, source: &str, origin: Option<&str>| {
        let (val, src, org) = &s[key];
        assert_eq!(val, value, "{key}");
        assert_eq!(src, source, "{key}");
        assert_eq!(org.as_str(), origin, "{key}");
    };
    is("cluster_name", "from-flag", "flag", Some("--cluster-name"));
    is("osd.listen", "10.0.0.12", "env", Some("PONTOON_OSD_LISTEN"));
    is(
        "etcd.endpoints",
        "http://10.0.0.1:2379,http://10.0.0.2:2379",
        "file",
        Some(f),
    );
    is("osd.shard_ports", "6800-7300", "file", Some(f));
    is("nbd.listen", "0.0.0.0:10809", "file", Some(f));
    is("nvmf.listen", "127.0.0.1:4420", "default", None);
    is("log_format", "text", "default", None);
    is(
        "osd.journal.\"/dev/nvme0n1\"",
        "/dev/nvme2n1p1",
        "file",
        Some(f),
    );
    assert_eq!(s["osd.host"].1, "default");
    assert!(s["osd.host"].0.is_string(), "the machine's name is shown");

    // The file through $PONTOON_CONFIG; the flag beats $PONTOON_ETCD,
    // which beats the file; --log-format is a flag of every command.
    let (v, s) = show(
        &["--log-format", "json"],
        &[
            ("PONTOON_CONFIG", f),
            ("PONTOON_ETCD", "http://10.9.9.9:2379"),
        ],
    );
    assert_eq!(v["config_file"]["chosen_by"], "env PONTOON_CONFIG");
    assert_eq!(s["etcd.endpoints"].0, "http://10.9.9.9:2379");
    assert_eq!(s["etcd.endpoints"].1, "env");
    assert_eq!(s["cluster_name"].0, "from-file");
    assert_eq!(s["log_format"].0, "json");
    assert_eq!(s["log_format"].2, "--log-format");

    // A `pontoon up` directory's cluster.toml still wins for the cluster.
    let up = dir.path().join("up");
    std::fs::create_dir(&up).unwrap();
    let cluster_toml = up.join("cluster.toml");
    std::fs::write(
        &cluster_toml,
        "cluster_name = \"local\"\netcd = \"http://127.0.0.1:23790\"\netcd_peer_port = \"23800\"\n\
         osds = \"1\"\nosd_size = \"1000\"\nshards = \"1\"\nlease_ttl = \"3s\"\nout_after = \"30s\"\n\
         listen = \"127.0.0.1\"\nhost = \"h\"\npid = \"1\"\n",
    )
    .unwrap();
    let (_, s) = show(&["--config", f, "--cluster", up.to_str().unwrap()], &[]);
    assert_eq!(s["etcd.endpoints"].0, "http://127.0.0.1:23790");
    assert_eq!(s["etcd.endpoints"].2, cluster_toml.to_str().unwrap());
    assert_eq!(s["cluster_name"].0, "local");

    // No file at all: everything is a default (or unset), and the text
    // form says so.
    let none = dir.path().join("none.toml");
    let out = run(&["config", "show"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("etcd.endpoints") && text.contains("(unset)"),
        "{text}"
    );
    // A named file that does not exist is an error, not a default.
    let out = run(&["config", "show", "--config", none.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the configuration file") && err.contains("none.toml"),
        "{err}"
    );
}

#[test]
fn a_bad_file_is_refused_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "cluster_name = \"c1\"\n\n[osd]\nshard_ports = \"7300-6800\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    for args in [
        vec!["config", "show", "--config", f],
        vec!["status", "--config", f],
        vec!["osd", "run", "--device", "/nonexistent", "--config", f],
        vec!["mgr", "--config", f],
    ] {
        let out = run(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with(&format!(
                "error: {f}: line 4: osd.shard_ports: invalid port range"
            )),
            "{args:?}: {err}"
        );
    }
    std::fs::write(&file, "[mgr]\nhttp = \"127.0.0.1:8080\"\nlisten = \"x\"\n").unwrap();
    let out = run(&["config", "show"], &[("PONTOON_CONFIG", f)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3: unknown key mgr.listen"),
        "unknown keys are refused: {err}"
    );
    std::fs::write(&file, "[osd\nlisten = \"10.0.0.1\"\n").unwrap();
    let out = run(&["config", "show", "--config", f], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(": line 1: "), "TOML syntax errors too: {err}");
}

/// A unix datagram socket standing in for systemd's `$NOTIFY_SOCKET`.
struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn new(dir: &Path, name: &str) -> Self {
        let path = dir.join(format!("{name}.notify"));
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Self { sock, path }
    }

    /// Waits for a message holding `READY=1` while `child` runs; returns
    /// the messages seen.
    fn wait_ready(&self, child: &mut Child, what: &str, log: &Path) -> Vec<String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.sock.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let ready = msg.lines().any(|l| l == "READY=1");
                seen.push(msg);
                if ready {
                    return seen;
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "{what} exited ({st}) before READY=1; log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{what} sent no READY=1 within {READY_TIMEOUT:?} (got {seen:?}); log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
}

/// Kills a daemon on drop (a failed test leaves nothing behind).
struct Daemon {
    child: Child,
    what: String,
    log: PathBuf,
}

impl Daemon {
    /// Starts `pontoon ARGS` with stderr and stdout to `dir/NAME.log`,
    /// `$NOTIFY_SOCKET` set, and waits for READY=1.
    fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let notify = NotifySocket::new(dir, name);
        let out = std::fs::File::create(&log).unwrap();
        let mut all_env: Vec<(&str, &str)> = env.to_vec();
        let sock = notify.path.to_str().unwrap().to_string();
        all_env.push(("NOTIFY_SOCKET", &sock));
        let child = pontoon_cmd(args, &all_env)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start the daemon");
        let mut d = Daemon {
            child,
            what: name.to_string(),
            log,
        };
        let t0 = Instant::now();
        let msgs = notify.wait_ready(&mut d.child, name, &d.log);
        println!(
            "{name}: READY=1 after {:.2} s ({:?})",
            t0.elapsed().as_secs_f64(),
            msgs.last().unwrap()
        );
        d
    }

    /// SIGTERM; the daemon must exit 0 within [`STOP_LIMIT`].
    fn stop(mut self) {
        let pid = self.child.id();
        let t0 = Instant::now();
        signal(pid, libc::SIGTERM);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                println!(
                    "{}: exited {st} {:.2} s after SIGTERM",
                    self.what,
                    t0.elapsed().as_secs_f64()
                );
                assert!(
                    st.success(),
                    "{} exited {st} after SIGTERM; log:\n{}",
                    self.what,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
                return;
            }
            assert!(
                t0.elapsed() < STOP_LIMIT,
                "{} still runs {STOP_LIMIT:?} after SIGTERM",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if alive(self.child.id()) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `count` consecutive free loopback ports (a base in 20000..32000).
fn free_ports(count: u16) -> u16 {
    let seed = std::process::id() as u64 * 7919
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    (0..500u64)
        .map(|i| 20_000 + ((seed + i * 104_729) % 12_000) as u16)
        .find(|base| {
            (*base..base + count).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        })
        .expect("free ports")
}

#[test]
fn daemons_take_the_file_notify_systemd_and_stop_on_sigterm() {
    let etcd = EtcdServer::start().expect("etcd (scripts/deps.sh installs etcd-server)");
    let dir = tempfile::tempdir().unwrap();
    let base = free_ports(16);
    // The first port of the shard range is taken: the shards skip it.
    let taken = std::net::TcpListener::bind(("127.0.0.1", base)).unwrap();
    let (mgr_http, nbd, nvmf) = (base + 10, base + 11, base + 12);
    let file = dir.path().join("pontoon.toml");
    std::fs::write(
        &file,
        format!(
            r#"cluster_name = "cfgtest"
log_format = "json"
[etcd]
endpoints = ["{etcd}"]
[osd]
listen = "127.0.0.1"
shard_ports = "{base}-{last}"
metrics = "off"
lease_ttl = "3s"
[mgr]
http = "127.0.0.1:{mgr_http}"
metrics = "off"
[nbd]
listen = "127.0.0.1:{nbd}"
metrics = "off"
[nvmf]
listen = "127.0.0.1:{nvmf}"
metrics = "off"
"#,
            etcd = etcd.endpoint(),
            last = base + 9,
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let env = [("PONTOON_CONFIG", f)];
    let device = dir.path().join("osd0");
    let osd = Daemon::start(
        dir.path(),
        "osd",
        &[
            "osd",
            "run",
            "--device",
            device.to_str().unwrap(),
            "--size",
            "256M",
            "--shards",
            "2",
        ],
        &env,
    );
    // The file's etcd and cluster name reach `status` too.
    let status = run(&["status", "--json"], &env);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: Value = serde_json::from_slice(&status.stdout).unwrap();
    let osds = v["osds"]["list"].as_array().expect("osds");
    assert_eq!(osds.len(), 1, "{v:#}");
    let ports: Vec<u16> = osds[0]["addrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .port()
        })
        .collect();
    println!(
        "shard ports {ports:?} in {base}-{} ({base} taken)",
        base + 9
    );
    assert_eq!(
        ports,
        [base + 1, base + 2],
        "the next free ports of the range"
    );
    drop(taken);
    let mgr = Daemon::start(dir.path(), "mgr", &["mgr"], &env);
    let nbd_gw = Daemon::start(dir.path(), "nbd", &["nbd"], &env);
    let nvmf_gw = Daemon::start(dir.path(), "nvmf", &["nvmf", "--allow-any-host"], &env);
    for port in [mgr_http, nbd, nvmf] {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("nothing listens on the file's port {port}: {e}"));
    }
    nvmf_gw.stop();
    nbd_gw.stop();
    mgr.stop();
    osd.stop();
    // log_format = "json": every log line the OSD wrote is a JSON object.
    let log = std::fs::read_to_string(dir.path().join("osd.log")).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the OSD logged nothing");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
    }
    assert!(lines.iter().any(|l| l.contains("\"registered\"")), "{log}");
}

#[test]
fn the_write_buffer_device_comes_from_the_file() {
    let etcd = EtcdServer::start().expect("etcd (scripts/deps.sh installs etcd-server)");
    let dir = tempfile::tempdir().unwrap();
    let device = dir.path().join("data");
    let journal = dir.path().join("wbuf");
    std::fs::File::create(&journal)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let file = dir.path().join("pontoon.toml");
    std::fs::write(
        &file,
        format!(
            "[etcd]\nendpoints = \"{}\"\n[osd]\nmetrics = \"off\"\n[osd.journal]\n{:?} = {:?}\n",
            etcd.endpoint(),
            device.display().to_string(),
            journal.display().to_string(),
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let dev = device.to_str().unwrap();
    let out = run(
        &["osd", "create", "--device", dev, "--size", "256M"],
        &[("PONTOON_CONFIG", f)],
    );
    assert!(
        out.status.success(),
        "osd create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The journal went to the write-buffer device: the data device alone
    // does not open.
    let empty = dir.path().join("empty.toml");
    std::fs::write(
        &empty,
        format!(
            "[etcd]\nendpoints = \"{}\"\n[osd]\nmetrics = \"off\"\n",
            etcd.endpoint()
        ),
    )
    .unwrap();
    refused_without_journal(dev, &empty);
    // With the file's [osd.journal], it serves.
    let osd = Daemon::start(
        dir.path(),
        "osd-wbuf",
        &["osd", "run", "--device", dev],
        &[("PONTOON_CONFIG", f)],
    );
    osd.stop();
    // `osd replace` takes the new device's write buffer from the file too.
    let device2 = dir.path().join("data2");
    let journal2 = dir.path().join("wbuf2");
    std::fs::File::create(&journal2)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    std::fs::write(
        &file,
        format!(
            "{}{:?} = {:?}\n",
            std::fs::read_to_string(&file).unwrap(),
            device2.display().to_string(),
            journal2.display().to_string(),
        ),
    )
    .unwrap();
    let env = [("PONTOON_CONFIG", f)];
    let destroyed = run(&["osd", "destroy", "0"], &env);
    assert!(
        destroyed.status.success(),
        "osd destroy: {}",
        String::from_utf8_lossy(&destroyed.stderr)
    );
    let dev2 = device2.to_str().unwrap();
    let out = run(
        &["osd", "replace", "0", "--device", dev2, "--size", "256M"],
        &env,
    );
    assert!(
        out.status.success(),
        "osd replace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    refused_without_journal(dev2, &empty);
    let osd = Daemon::start(
        dir.path(),
        "osd-wbuf2",
        &["osd", "run", "--device", dev2],
        &env,
    );
    osd.stop();
}

/// `osd run --device DEV` with a configuration that names no write-buffer
/// device fails, saying the journal is missing.
fn refused_without_journal(dev: &str, config: &std::path::Path) {
    let mut alone = pontoon_cmd(
        &["osd", "run", "--device", dev],
        &[("PONTOON_CONFIG", config.to_str().unwrap())],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = alone.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = alone.kill();
            panic!("osd run without its journal device did not fail");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::io::read_to_string(alone.stderr.take().unwrap()).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("journal"), "{err}");
}
