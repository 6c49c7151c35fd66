//! The Debian package, end to end:
//! 1. `scripts/build-deb.sh --profile ci --no-build` packages the binary
//!    the test suite built; its contents are checked;
//! 2. lintian reports no error (`E:`) about it;
//! 3. it installs with dpkg into a clean Debian 12 root made by debootstrap
//!    (minbase plus systemd, from the machine's apt mirror; kept under
//!    `target/debian-root/` between runs): the `pontoon` user exists, in
//!    group disk, the configuration file is a conffile;
//! 4. `systemd-analyze verify` passes on every unit, in that root;
//! 5. the units' ExecStart lines, run by hand in the root as the units
//!    would run them (user pontoon, group disk, `$NOTIFY_SOCKET`), against
//!    an etcd the test starts and the root's /etc/pontoon/pontoon.toml,
//!    make a working single-node cluster: every daemon sends READY=1, a
//!    volume written and read back through the NBD gateway with qemu-io
//!    (host side), then every daemon exits 0 soon after SIGTERM;
//! 6. the package is purged cleanly.
//!
//! systemd itself cannot run in this test environment (no init in a
//! chroot), so steps 4 and 5 stand in for `systemctl start`.
//!
//! Needs root (chroot, debootstrap), debootstrap, lintian, etcd-server and
//! qemu-utils (scripts/deps.sh test installs them) and the apt mirror the
//! first time. Prints each step's time.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{PONTOON, alive, signal};
use pontoon_cluster::testkit::EtcdServer;
use pontoon_testtools::{need, run as run_limited};
use serde_json::Value;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory and cargo profile the binary under test was built in.
fn target_and_profile() -> (PathBuf, String) {
    let bin = Path::new(PONTOON);
    let profile_dir = bin.parent().expect("binary's directory");
    let profile = profile_dir
        .file_name()
        .expect("profile")
        .to_string_lossy()
        .into_owned();
    let profile = if profile == "debug" {
        "dev".to_string()
    } else {
        profile
    };
    (
        profile_dir.parent().expect("target dir").to_path_buf(),
        profile,
    )
}

/// Runs `cmd` (bounded), failing the test with its output on error;
/// returns stdout.
fn must(mut cmd: impl std::borrow::BorrowMut<Command>, limit: Duration) -> String {
    let r = run_limited(cmd.borrow_mut(), limit);
    assert!(r.success(), "{}", r.report());
    r.stdout.clone()
}

/// A step's time.
fn step(name: &str, t0: Instant) {
    println!("{name}: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The apt mirror this machine uses (debootstrap's source).
fn apt_mirror() -> String {
    let deb822 =
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    let from_deb822 = deb822
        .lines()
        .filter_map(|l| l.strip_prefix("URIs:"))
        .flat_map(str::split_whitespace)
        .find(|u| !u.contains("security"));
    let classic = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    let from_classic = classic
        .lines()
        .filter(|l| l.starts_with("deb "))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("http")))
        .find(|u| !u.contains("security"));
    from_deb822
        .or(from_classic)
        .unwrap_or("http://deb.debian.org/debian")
        .to_string()
}

/// A clean Debian 12 root (minbase, adduser, systemd), made once with
/// debootstrap and kept in `target/debian-root/bookworm`.
fn cached_root(target: &Path) -> PathBuf {
    let base = target.join("debian-root");
    let root = base.join("bookworm");
    if root.join(".pontoon-complete").exists() {
        return root;
    }
    need("debootstrap", "debootstrap");
    let partial = base.join("bookworm.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).unwrap();
    let t0 = Instant::now();
    must(
        Command::new("debootstrap")
            .args(["--variant=minbase", "--include=adduser,systemd", "bookworm"])
            .arg(&partial)
            .arg(apt_mirror()),
        Duration::from_secs(1200),
    );
    step("debootstrap (once per target directory)", t0);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::rename(&partial, &root).unwrap();
    std::fs::write(root.join(".pontoon-complete"), "").unwrap();
    root
}

/// A throwaway copy of the clean root, removed on drop.
struct Root {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Root {
    fn copy_of(clean: &Path) -> Root {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root");
        must(
            Command::new("cp").arg("-a").arg(clean).arg(&path),
            Duration::from_secs(300),
        );
        Root { path, _dir: dir }
    }

    /// `chroot ROOT ARGS` as root.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        c.arg(&self.path).args(args);
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        c
    }

    /// `chroot --userspec pontoon:pontoon --groups disk ROOT ARGS`: as the
    /// units run their ExecStart.
    fn as_pontoon(&self, args: &[&str]) -> Command {
        let mut c = Command::new("chroot");
        c.args(["--userspec=pontoon:pontoon", "--groups=pontoon,disk"])
            .arg(&self.path)
            .args(args);
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        c
    }

    fn file(&self, p: &str) -> PathBuf {
        self.path.join(p.trim_start_matches('/'))
    }
}

/// A daemon started from a unit's ExecStart line, killed on drop.
struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; it must exit 0 within 10 s (the units allow 30-60 s).
    fn stop(mut self) {
        let t0 = Instant::now();
        signal(self.child.id(), libc::SIGTERM);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                println!(
                    "{}: exit {st} {:.2} s after SIGTERM",
                    self.name,
                    t0.elapsed().as_secs_f64()
                );
                assert!(st.success(), "{}: {st}; log:\n{}", self.name, self.log());
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{} still runs 10 s after SIGTERM; log:\n{}",
                self.name,
                self.log()
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

/// The ExecStart line of an installed unit, `%f` replaced by `instance_path`.
fn exec_start(root: &Root, unit: &str, instance_path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root.file(&format!("/lib/systemd/system/{unit}")))
        .unwrap_or_else(|e| panic!("{unit}: {e}"));
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("{unit} has no ExecStart"));
    line.split_whitespace()
        .map(|w| w.replace("%f", instance_path))
        .collect()
}

/// Starts `unit`'s ExecStart in the root as its user, with a notify
/// socket, and waits (at most 60 s) for READY=1.
fn start_unit(root: &Root, logs: &Path, unit: &str, instance_path: &str) -> Daemon {
    let argv = exec_start(root, unit, instance_path);
    assert_eq!(argv[0], "/usr/bin/pontoon", "{unit}: {argv:?}");
    let name = unit.trim_end_matches(".service").to_string();
    let sock_in_root = format!("/run/pontoon-test/{name}.sock");
    let sock_path = root.file(&sock_in_root);
    std::fs::create_dir_all(sock_path.parent().unwrap()).unwrap();
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let log = logs.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let child = root
        .as_pontoon(&args)
        .env("NOTIFY_SOCKET", &sock_in_root)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("chroot");
    let mut d = Daemon { name, child, log };
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.lines().any(|l| l == "READY=1") {
                println!(
                    "{unit} ({}): READY=1 after {:.2} s: {msg:?}",
                    argv.join(" "),
                    t0.elapsed().as_secs_f64()
                );
                return d;
            }
        }
        if let Ok(Some(st)) = d.child.try_wait() {
            panic!("{unit} exited ({st}) before READY=1; log:\n{}", d.log());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{unit}: no READY=1 within 60 s; log:\n{}",
            d.log()
        );
    }
}

/// A free loopback port (below the ephemeral range).
fn free_port() -> u16 {
    common::free_port()
}

#[test]
fn the_package_installs_into_a_clean_debian_root_and_its_units_run_a_cluster() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (chroot, debootstrap), as CI runs"
    );
    let (target, profile) = target_and_profile();
    let work = tempfile::tempdir().unwrap();

    // 1. Build the package from the binary under test.
    let t0 = Instant::now();
    let out = must(
        Command::new(repo().join("scripts/build-deb.sh"))
            .args(["--profile", &profile, "--no-build", "--out"])
            .arg(work.path())
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(repo()),
        Duration::from_secs(300),
    );
    let deb = PathBuf::from(out.lines().last().expect("build-deb.sh prints the .deb"));
    assert!(deb.is_file(), "{out}");
    step("build-deb.sh", t0);
    println!(
        "{}: {} KiB",
        deb.display(),
        std::fs::metadata(&deb).unwrap().len() / 1024
    );
    let contents = must(
        Command::new("dpkg-deb").arg("--contents").arg(&deb),
        Duration::from_secs(60),
    );
    for path in [
        "./usr/bin/pontoon",
        "./etc/pontoon/pontoon.toml",
        "./lib/systemd/system/pontoon-osd@.service",
        "./lib/systemd/system/pontoon-mgr.service",
        "./lib/systemd/system/pontoon-nbd.service",
        "./lib/systemd/system/pontoon-nvmf.service",
        "./usr/share/man/man1/pontoon.1.gz",
        "./usr/share/man/man1/pontoon-osd-run.1.gz",
        "./usr/share/man/man1/pontoon-config-show.1.gz",
        "./usr/share/bash-completion/completions/pontoon",
        "./usr/share/zsh/vendor-completions/_pontoon",
        "./usr/share/fish/vendor_completions.d/pontoon.fish",
        "./usr/share/doc/pontoon/copyright",
        "./usr/share/doc/pontoon/deployment.md.gz",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(path)),
            "{path} is not in the package:\n{contents}"
        );
    }
    let control = must(
        Command::new("dpkg-deb").arg("--info").arg(&deb),
        Duration::from_secs(60),
    );
    assert!(
        control.contains("Depends: adduser, libc6"),
        "dependencies from dpkg-shlibdeps:\n{control}"
    );

    // 2. lintian: no errors.
    let t0 = Instant::now();
    let r = run_limited(
        need("lintian", "lintian").arg("--allow-root").arg(&deb),
        Duration::from_secs(600),
    );
    let tags: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.len() > 2 && &l[1..2] == ":")
        .collect();
    println!("lintian: {} tag(s):\n{}", tags.len(), tags.join("\n"));
    let errors: Vec<&&str> = tags.iter().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{}", r.report());
    step("lintian", t0);

    // 3. Install into a clean root.
    let t0 = Instant::now();
    let clean = cached_root(&target);
    let root = Root::copy_of(&clean);
    step("clean root ready", t0);
    let t0 = Instant::now();
    std::fs::copy(&deb, root.file("/tmp/pontoon.deb")).unwrap();
    must(
        root.cmd(&["dpkg", "-i", "/tmp/pontoon.deb"]),
        Duration::from_secs(300),
    );
    step("dpkg -i", t0);
    let passwd = std::fs::read_to_string(root.file("/etc/passwd")).unwrap();
    let user: Vec<&str> = passwd
        .lines()
        .find(|l| l.starts_with("pontoon:"))
        .expect("the pontoon user")
        .split(':')
        .collect();
    let (uid, gid): (u32, u32) = (user[2].parse().unwrap(), user[3].parse().unwrap());
    assert!(uid < 1000, "a system user: {user:?}");
    let groups = std::fs::read_to_string(root.file("/etc/group")).unwrap();
    assert!(
        groups.lines().any(|l| l.starts_with("disk:")
            && l.rsplit(':')
                .next()
                .unwrap()
                .split(',')
                .any(|m| m == "pontoon")),
        "pontoon is in group disk:\n{groups}"
    );
    let state = std::fs::metadata(root.file("/var/lib/pontoon")).unwrap();
    assert_eq!((state.uid(), state.gid()), (uid, gid));
    let status = must(
        root.cmd(&["dpkg-query", "-W", "-f=${Conffiles}", "pontoon"]),
        Duration::from_secs(30),
    );
    assert!(status.contains("/etc/pontoon/pontoon.toml"), "{status}");
    let help = must(
        root.cmd(&["pontoon", "config", "show"]),
        Duration::from_secs(30),
    );
    assert!(
        help.contains("/etc/pontoon/pontoon.toml (default)"),
        "{help}"
    );

    // 4. systemd-analyze verify, in the root (its systemd, its binary).
    let t0 = Instant::now();
    for unit in [
        "pontoon-osd@var-lib-pontoon-osd0.img.service",
        "pontoon-mgr.service",
        "pontoon-nbd.service",
        "pontoon-nvmf.service",
    ] {
        let r = run_limited(
            Command::new("systemd-analyze")
                .arg("verify")
                .arg(format!("--root={}", root.path.display()))
                .arg("--man=no")
                .arg(unit),
            Duration::from_secs(60),
        );
        assert!(
            r.success() && r.stderr.trim().is_empty(),
            "systemd-analyze verify {unit}: {}",
            r.report()
        );
    }
    step("systemd-analyze verify (4 units)", t0);

    // 5. The units' ExecStart lines against a test etcd.
    let t0 = Instant::now();
    let etcd = EtcdServer::start().expect("etcd (scripts/deps.sh installs etcd-server)");
    let (http, nbd, nvmf) = (free_port(), free_port(), free_port());
    let shards = free_port();
    let config = format!(
        "cluster_name = \"packaged\"\n\
         [etcd]\nendpoints = [\"{}\"]\n\
         [osd]\nlisten = \"127.0.0.1\"\nshard_ports = \"{shards}-{}\"\nmetrics = \"off\"\n\
         [mgr]\nhttp = \"127.0.0.1:{http}\"\nmetrics = \"off\"\n\
         [nbd]\nlisten = \"127.0.0.1:{nbd}\"\nmetrics = \"off\"\n\
         [nvmf]\nlisten = \"127.0.0.1:{nvmf}\"\nmetrics = \"off\"\n",
        etcd.endpoint(),
        shards + 20,
    );
    std::fs::write(root.file("/etc/pontoon/pontoon.toml"), config).unwrap();
    // A file-backed OSD in the units' state directory, owned by pontoon.
    let device = "/var/lib/pontoon/osd0.img";
    let f = std::fs::File::create(root.file(device)).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    std::os::unix::fs::chown(root.file(device), Some(uid), Some(gid)).unwrap();
    // `osd create` formats the device where the binary has it (the OSD
    // identity work); otherwise `osd run` formats a new device itself.
    let has_create = root
        .cmd(&["pontoon", "osd", "create", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    if has_create {
        must(
            root.as_pontoon(&["/usr/bin/pontoon", "osd", "create", "--device", device]),
            Duration::from_secs(60),
        );
    }
    let logs = work.path();
    let osd = start_unit(&root, logs, "pontoon-osd@.service", device);
    let mgr = start_unit(&root, logs, "pontoon-mgr.service", "");
    let nbd_gw = start_unit(&root, logs, "pontoon-nbd.service", "");
    let nvmf_gw = start_unit(&root, logs, "pontoon-nvmf.service", "");
    step("four units ready", t0);

    // A pool, a volume, and data through NBD.
    let t0 = Instant::now();
    let cli = |args: &[&str]| -> String {
        let mut all = vec!["/usr/bin/pontoon"];
        all.extend_from_slice(args);
        must(&mut root.as_pontoon(&all), Duration::from_secs(60))
    };
    cli(&[
        "pool",
        "create",
        "p1",
        "--size",
        "1",
        "--pgs",
        "8",
        "--failure-domain",
        "osd",
    ]);
    cli(&["volume", "create", "v1", "--size", "64M", "--pool", "p1"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = serde_json::from_str(&cli(&["status", "--json"])).unwrap();
        let states = v["pgs"]["states"].as_object().cloned().unwrap_or_default();
        let clean = states.get("active+clean").and_then(Value::as_u64) == Some(8);
        if clean {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "PGs not active+clean within 60 s: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let url = format!("nbd://127.0.0.1:{nbd}/v1");
    let io = must(
        need("qemu-io", "qemu-utils").args([
            "-f",
            "raw",
            &url,
            "-c",
            "write -P 0x5a 0 8M",
            "-c",
            "read -P 0x5a 0 8M",
            "-c",
            "read -P 0 8M 1M",
        ]),
        Duration::from_secs(120),
    );
    assert!(!io.contains("Pattern verification failed"), "{io}");
    println!("qemu-io over {url}:\n{io}");
    step("pool, volume, 8 MiB written and read back over NBD", t0);

    // Every daemon exits 0 on SIGTERM, the gateways first.
    let t0 = Instant::now();
    nvmf_gw.stop();
    nbd_gw.stop();
    mgr.stop();
    osd.stop();
    step("SIGTERM to all four", t0);

    // 6. Purge.
    let t0 = Instant::now();
    must(
        root.cmd(&["dpkg", "--purge", "pontoon"]),
        Duration::from_secs(120),
    );
    assert!(!root.file("/usr/bin/pontoon").exists());
    assert!(!root.file("/etc/pontoon/pontoon.toml").exists());
    step("dpkg --purge", t0);
}
