//! The NBD gateway of a real local cluster driven by real NBD clients:
//! `pontoon up` (etcd, a manager, three OSD processes on 1 GiB files, and
//! the `pontoon nbd` gateway child) serving every volume by name, then
//! nbdinfo and qemu-img, qemu-io, nbdcopy, fio's nbd engine (also while an
//! OSD is killed with SIGKILL and restarted), the Linux kernel's nbd driver
//! in a VM, hostile raw clients, and a SIGKILLed gateway replaced by a new
//! `pontoon nbd`.
//!
//! One cluster serves every test of this file: it starts with the first
//! test that needs it and the tests take turns (one at a time, so the
//! kernel's VM runs alone and killing an OSD or the gateway disturbs no
//! other test). Each test has its own volume. A small shell watcher owns
//! `pontoon up`: when this test process exits, however it exits, it kills
//! the replacement gateway and stops `pontoon up` (which stops everything
//! it started, restarted OSDs too) by pid, then removes the cluster's
//! directory (`PONTOON_KEEP_CLUSTER=1` keeps it).
//!
//! Needs the `pontoon` binary built beside the test (`cargo build
//! --workspace --bins` with the same profile, as scripts/test.sh does),
//! Debian's etcd-server and the client tools (`scripts/deps.sh test`). The
//! tests assert on what the tools report and on the data, never on time.

mod common;

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use common::scenarios::*;
use common::tools::*;
use common::*;
use pontoon_nbd::proto::*;

const GIB: u64 = 1 << 30;
/// The cluster's objects (the default object size).
const OBJECT: u64 = 4 * MIB;
/// Longest wait for any one state of the cluster.
const WAIT: Duration = Duration::from_secs(90);
/// Placement groups of the pool.
const PGS: u64 = 32;

/// Every volume, created when the cluster starts, in the order the
/// gateway lists them (by name). Each test uses its own.
const VOLUMES: [(&str, u64); 8] = [
    ("copy", GIB),
    ("fio", 256 * MIB),
    ("fio-kill", 256 * MIB),
    ("hostile", 64 * MIB),
    ("kernel", 256 * MIB),
    ("qemu", GIB),
    ("restart", 96 * MIB),
    ("thin", GIB),
];

fn size_of(volume: &str) -> u64 {
    VOLUMES
        .iter()
        .find(|(n, _)| *n == volume)
        .map(|(_, s)| *s)
        .expect("a volume of the list")
}

/// Runs `pontoon up` in the background (argument 3 on) and stops it once
/// this test process (argument 1) is gone; removes the cluster directory
/// (argument 2) after that. It ignores the signals a terminal sends the
/// whole process group (an interrupted `cargo test`), so that it outlives
/// the test and cleans up.
const WATCHER: &str = r#"
trap '' INT HUP TERM
parent=$1; dir=$2; shift 2
"$@" </dev/null >"$dir/up.log" 2>&1 &
up=$!
echo "$up" >"$dir/watched.pid"
while kill -0 "$parent" 2>/dev/null; do sleep 0.2; done
if [ -f "$dir/gateways.pid" ]; then
    for pid in $(cat "$dir/gateways.pid"); do
        if grep -qaF "$dir" "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid"; fi
    done
fi
kill -TERM "$up" 2>/dev/null
wait "$up"
if [ -z "$KEEP" ] && [ -f "$dir/watched.pid" ]; then rm -rf "$dir"; fi
"#;

/// Where the `pontoon` binary is: target/<profile>/pontoon, beside this
/// test's deps directory.
fn pontoon_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("pontoon");
    assert!(
        bin.exists(),
        "{} is missing: build it first with the same profile (cargo build --workspace --bins, \
         as scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// The process state letter from /proc (None once it is gone).
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn alive(pid: u32) -> bool {
    proc_state(pid).is_some_and(|s| s != 'Z')
}

fn cmdline(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

fn kill9(pid: u32) {
    let r = run_ok(Process::new("kill").args(["-9", &pid.to_string()]));
    assert!(r.success());
}

fn read_pid(path: &Path) -> u32 {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The shared cluster.
struct Cluster {
    dir: PathBuf,
    /// The gateway serving the tests: (port, pid); `pontoon up`'s child
    /// first, a replacement after the restart test.
    gateway: Mutex<(u16, u32)>,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared cluster, healthy, and this test's turn (held to its end).
fn cluster() -> (MutexGuard<'static, ()>, &'static Cluster) {
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let c = CLUSTER
        .get_or_init(|| {
            std::panic::catch_unwind(Cluster::start).map_err(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into())
            })
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("the shared cluster did not start: {e}"));
    c.wait_healthy("before the test");
    (turn, c)
}

impl Cluster {
    fn start() -> Cluster {
        let begun = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("pontoon-nbd-cluster")
            .tempdir()
            .expect("tempdir")
            .keep();
        let port = free_port();
        let mut watcher = Process::new("sh");
        watcher
            .args(["-c", WATCHER, "sh"])
            .arg(std::process::id().to_string())
            .arg(&dir)
            .arg(pontoon_bin())
            .args(["up", "--dir"])
            .arg(&dir)
            .args(["--osds", "3", "--osd-size", "1G", "--shards", "1"])
            .args(["--lease-ttl", "3s", "--nbd", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if std::env::var_os("PONTOON_KEEP_CLUSTER").is_some() {
            watcher.env("KEEP", "1");
        }
        // Not waited for: it outlives every test and ends by itself.
        drop(watcher.spawn().expect("spawn sh for pontoon up"));
        let mut c = Cluster {
            dir,
            gateway: Mutex::new((port, 0)),
        };
        let deadline = Instant::now() + WAIT;
        while !c.dir.join("cluster.toml").exists() {
            let up = c.dir.join("watched.pid");
            assert!(
                !up.exists() || alive(read_pid(&up)),
                "pontoon up exited before it was ready:\n{}",
                c.logs()
            );
            assert!(
                Instant::now() < deadline,
                "pontoon up was not ready within {WAIT:?}:\n{}",
                c.logs()
            );
            thread::sleep(Duration::from_millis(100));
        }
        let pid = read_pid(&c.dir.join("run/nbd.pid"));
        *c.gateway.get_mut().unwrap() = (port, pid);
        eprintln!(
            "cluster up in {:?} at {} (gateway 127.0.0.1:{port}, pid {pid})",
            begun.elapsed(),
            c.dir.display()
        );
        c.cli(&[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            &PGS.to_string(),
        ]);
        for (name, size) in VOLUMES {
            c.cli(&[
                "volume",
                "create",
                name,
                "--size",
                &format!("{}M", size / MIB),
            ]);
        }
        c.wait_healthy("the new pool");
        // The gateway started before the volumes: it learns of them from
        // the map feed.
        let deadline = Instant::now() + WAIT;
        loop {
            let r = run(nbdinfo().args(["--list", &c.base()]), LIMIT);
            if r.success() && listed_exports(&r.stdout).len() == VOLUMES.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway does not list the volumes:\n{}\n{}",
                r.report(),
                c.logs()
            );
            thread::sleep(Duration::from_millis(200));
        }
        eprintln!("cluster ready in {:?}", begun.elapsed());
        c
    }

    fn port(&self) -> u16 {
        self.gateway
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port()))
    }

    /// `nbd://127.0.0.1:PORT`.
    fn base(&self) -> String {
        format!("nbd://127.0.0.1:{}", self.port())
    }

    fn uri(&self, volume: &str) -> String {
        format!("{}/{volume}", self.base())
    }

    /// The last lines of `pontoon up`'s output and of every log.
    fn logs(&self) -> String {
        let mut files = vec![self.dir.join("up.log")];
        if let Ok(d) = fs::read_dir(self.dir.join("log")) {
            let mut logs: Vec<PathBuf> = d.flatten().map(|e| e.path()).collect();
            logs.sort();
            files.extend(logs.into_iter().filter(|p| !p.ends_with("etcd.log")));
        }
        let mut out = String::new();
        for f in files {
            let text = fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {} (last lines) ---\n", f.display()));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// `pontoon ARGS --cluster DIR`, which must succeed.
    fn cli(&self, args: &[&str]) -> Ran {
        let r = run(
            Process::new(pontoon_bin())
                .args(args)
                .arg("--cluster")
                .arg(&self.dir),
            LIMIT,
        );
        assert!(
            r.success(),
            "pontoon {args:?} failed:\n{}\n{}",
            r.report(),
            self.logs()
        );
        r
    }

    /// `pontoon status --json`.
    fn status(&self) -> String {
        self.cli(&["status", "--json"]).stdout
    }

    /// Waits until the three OSDs are up and in and every PG's primary
    /// reports it active+clean.
    fn wait_healthy(&self, what: &str) {
        self.wait_status(what, |s| {
            json_u64s(s, "up") == [3]
                && json_u64s(s, "in") == [3]
                && json_u64s(s, "active+clean") == [PGS]
        });
    }

    /// Polls `status --json` until `pred` holds (bounded by [`WAIT`]).
    fn wait_status(&self, what: &str, pred: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = self.status();
            if pred(&s) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the cluster did not get there within {WAIT:?}; status:\n{s}\n{}",
                self.logs()
            );
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// Kills OSD `id` with SIGKILL, by its pid file.
    fn kill9_osd(&self, id: u32) {
        let pid = read_pid(&self.dir.join(format!("run/osd.{id}.pid")));
        assert!(
            cmdline(pid).contains(&*self.dir.to_string_lossy()),
            "pid {pid} is not this cluster's osd.{id}: {}",
            cmdline(pid)
        );
        kill9(pid);
        eprintln!("killed osd.{id} (pid {pid}) with SIGKILL");
    }
}

/// `fio --ioengine=nbd` on `uri`: 4 KiB random writes at QD32 over 64 MiB
/// with crc32c verify headers, plus `extra`.
fn fio_job(dir: &Path, uri: &str, extra: &[&str]) -> Process {
    let mut c = fio();
    // fio may save verify state files in its working directory.
    c.current_dir(dir).args([
        "--name=t",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--size=64m",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    c.args(extra);
    c
}

/// A child process killed (by pid) if the test ends before it does.
struct Reaped(Child);

impl Reaped {
    fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A finished fio run had no error and read (verified) `verified` bytes,
/// and, with a write phase, wrote `written` bytes.
fn assert_fio_clean(r: &Ran, verified: u64, written: Option<u64>) {
    assert!(r.success(), "fio failed:\n{}", r.report());
    assert!(
        fio_errors(&r.stdout).iter().all(|&e| e == 0),
        "{}",
        r.report()
    );
    // read, write, trim
    let io = json_u64s(&r.stdout, "io_bytes");
    assert_eq!(io[0], verified, "{}", r.report());
    if let Some(w) = written {
        assert_eq!(io[1], w, "{}", r.report());
    }
}

#[test]
fn nbdinfo_and_qemu_img_show_every_volume_with_its_size() {
    let (_turn, c) = cluster();
    let list = run_ok(nbdinfo().args(["--list", &c.base()])).stdout;
    let expected: Vec<(String, u64)> = VOLUMES.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    assert_eq!(listed_exports(&list), expected, "nbdinfo --list:\n{list}");
    for (_, size) in VOLUMES {
        assert!(
            list.contains(&format!("description: Pontoon volume, {size} bytes")),
            "{list}"
        );
    }
    let json = run_ok(nbdinfo().args(["--json", &c.uri("qemu")])).stdout;
    assert_eq!(json_u64(&json, "export-size"), GIB, "{json}");
    for yes in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
    ] {
        assert!(json_bool(&json, yes), "{yes} should be true:\n{json}");
    }
    assert!(!json_bool(&json, "is_read_only"), "{json}");
    assert!(json.contains("\"base:allocation\""), "{json}");
    for (name, size) in VOLUMES {
        let info = run_ok(qemu_img().args(["info", "--output=json", &c.uri(name)])).stdout;
        assert_eq!(json_u64(&info, "virtual-size"), size, "{name}: {info}");
    }
    // An unknown volume: qemu shows the gateway's message.
    let r = run(qemu_img().args(["info", &c.uri("nosuch")]), LIMIT);
    assert!(!r.success(), "{}", r.report());
    assert!(
        r.stderr.contains("no volume named 'nosuch'"),
        "{}",
        r.report()
    );
}

#[test]
fn qemu_io_patterns_read_back_across_object_boundaries() {
    let (_turn, c) = cluster();
    let u = c.uri("qemu");
    // Unaligned and aligned writes, zeroes and discards in the first six
    // 4 MiB objects, many across object boundaries; checked byte for
    // byte on the same and on a new connection.
    qemu_io_scenario(&u);
    // Deallocated ranges are holes, written ones data, in the cluster's
    // allocation map too.
    let map = nbd_map(&u);
    assert!(covered(&map, 16 * MIB, MIB, false), "{map:?}");
    assert!(covered(&map, 18 * MIB, MIB, false), "{map:?}");
    assert!(covered(&map, 0, 4096, true), "{map:?}");
    assert!(covered(&map, 4096, 24576, false), "{map:?}");
    assert!(covered(&map, 28672, 16384, true), "{map:?}");
    assert!(covered(&map, 2 * OBJECT - 65536, 131072, true), "{map:?}");
    assert!(covered(&map, 24 * MIB, GIB - 24 * MIB, false), "{map:?}");
    // Many writes into one object from concurrent aio requests, each
    // unaligned, then one read across three objects.
    let base = 40 * MIB - 5000;
    let mut cmds: Vec<String> = (0..32u64)
        .map(|i| format!("aio_write -P {} {} 3001", i + 1, base + i * 3001))
        .collect();
    cmds.push("aio_flush".into());
    cmds.push(format!("write -P 0x99 {} {}", 44 * MIB - 1, 4 * MIB + 2));
    qemu_io_run(&u, &cmds);
    let mut check: Vec<String> = (0..32u64)
        .map(|i| format!("read -q -P {} {} 3001", i + 1, base + i * 3001))
        .collect();
    check.push(format!("read -q -P 0x99 {} {}", 44 * MIB - 1, 4 * MIB + 2));
    check.push(format!("read -q -P 0 {} 5000", 40 * MIB - 10_000));
    check.push(format!("read -q -P 0 {} 8192", 48 * MIB + 1));
    qemu_io_run(&u, &check);
}

#[test]
fn nbdcopy_round_trips_256_mib_of_random_data_through_a_volume() {
    let (_turn, c) = cluster();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.img"), dir.path().join("out.img"));
    random_file(&input, 256 * MIB, 1);
    let u = c.uri("copy");
    run_ok(nbdcopy().arg(&input).arg(&u));
    run_ok(nbdcopy().arg(&u).arg(&output));
    assert_eq!(fs::metadata(&output).unwrap().len(), GIB);
    assert_zero_from(&output, 256 * MIB);
    File::options()
        .write(true)
        .open(&output)
        .unwrap()
        .set_len(256 * MIB)
        .unwrap();
    assert_eq!(sha256(&input), sha256(&output), "the copy differs");
    assert_eq!(
        nbd_map(&u),
        vec![
            extent(0, 256 * MIB, true),
            extent(256 * MIB, GIB - 256 * MIB, false)
        ]
    );
}

/// What the thin volume holds: (offset, length, qemu-io pattern).
const THIN_DATA: [(u64, u64, u8); 4] = [
    (0, 2 * MIB, 0x11),
    (OBJECT - 8192, 16384, 0x12),
    (300 * MIB, 64 * 1024, 0x13),
    (GIB - 4096, 4096, 0x14),
];

/// A TCP proxy in front of the gateway that counts the bytes clients ask
/// to read (the lengths of their NBD_CMD_READs).
struct ReadCounter {
    port: u16,
    read_bytes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl ReadCounter {
    fn start(upstream: SocketAddr) -> ReadCounter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let read_bytes = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, halt) = (read_bytes.clone(), stop.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if halt.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || {
                    let _ = io::copy(&mut &s2, &mut &c2);
                    let _ = c2.shutdown(Shutdown::Write);
                });
                let count = count.clone();
                thread::spawn(move || {
                    let _ = forward_requests(&client, &server, &count);
                    let _ = server.shutdown(Shutdown::Write);
                });
            }
        });
        ReadCounter {
            port,
            read_bytes,
            stop,
        }
    }

    fn uri(&self, volume: &str) -> String {
        format!("nbd://127.0.0.1:{}/{volume}", self.port)
    }

    fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for ReadCounter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies the client's side of an NBD connection to the server piece by
/// piece (client flags, options, then requests with their write
/// payloads), adding up the lengths of read requests.
fn forward_requests(from: &TcpStream, mut to: &TcpStream, reads: &AtomicU64) -> io::Result<()> {
    let mut r = BufReader::new(from);
    let mut flags = [0u8; 4];
    r.read_exact(&mut flags)?;
    to.write_all(&flags)?;
    let mut head = [0u8; REQUEST_LEN];
    loop {
        r.read_exact(&mut head[..8])?;
        if u64::from_be_bytes(head[..8].try_into().unwrap()) != IHAVEOPT {
            r.read_exact(&mut head[8..])?;
            break;
        }
        r.read_exact(&mut head[8..OPTION_HEADER_LEN])?;
        to.write_all(&head[..OPTION_HEADER_LEN])?;
        let len = u32::from_be_bytes(head[12..16].try_into().unwrap());
        io::copy(&mut (&mut r).take(u64::from(len)), &mut to)?;
    }
    loop {
        let req = Request::decode(&head).map_err(|e| io::Error::other(format!("{e:?}")))?;
        to.write_all(&head)?;
        match req.command {
            Command::Read => {
                reads.fetch_add(u64::from(req.length), Ordering::SeqCst);
            }
            Command::Write => {
                io::copy(&mut (&mut r).take(u64::from(req.length)), &mut to)?;
            }
            _ => {}
        }
        r.read_exact(&mut head)?;
    }
}

#[test]
fn thin_volume_reports_holes_and_nbdcopy_reads_only_its_data() {
    let (_turn, c) = cluster();
    let u = c.uri("thin");
    let cmds: Vec<String> = THIN_DATA
        .iter()
        .map(|(off, len, pat)| format!("write -P {pat:#x} {off} {len}"))
        .collect();
    qemu_io_run(&u, &cmds);
    // The map: the data, and holes (reading as zeros) everywhere else.
    let mut expected = Vec::new();
    let mut pos = 0;
    for (off, len, _) in THIN_DATA {
        if off > pos {
            expected.push(extent(pos, off - pos, false));
        }
        expected.push(extent(off, len, true));
        pos = off + len;
    }
    assert_eq!(pos, GIB);
    let map = nbd_map(&u);
    assert_eq!(map, expected, "nbdinfo --map of the thin volume");
    let data: u64 = THIN_DATA.iter().map(|d| d.1).sum();

    // nbdcopy through a proxy that counts what it asks to read.
    let proxy = ReadCounter::start(c.addr());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("thin.img");
    run_ok(nbdcopy().arg(proxy.uri("thin")).arg(&out));
    let sparse_read = proxy.read_bytes();
    assert_eq!(fs::metadata(&out).unwrap().len(), GIB);
    let mut f = File::open(&out).unwrap();
    let mut got = Vec::new();
    for (off, len, pat) in THIN_DATA {
        got.resize(len as usize, 0);
        f.seek(SeekFrom::Start(off)).unwrap();
        f.read_exact(&mut got).unwrap();
        assert!(
            got.iter().all(|&b| b == pat),
            "copied data at {off} differs"
        );
    }
    assert_zero_outside(&out, &THIN_DATA);
    // It followed the block status: it asked to read about the data...
    assert!(
        (data..4 * data).contains(&sparse_read),
        "copying the thin volume read {sparse_read} bytes for {data} bytes of data"
    );
    // ...where a copy ignoring extents asks for every byte.
    let before = proxy.read_bytes();
    run_ok(nbdcopy().args(["--no-extents", &proxy.uri("thin"), "null:"]));
    let full_read = proxy.read_bytes() - before;
    assert!(full_read >= GIB, "a full copy read only {full_read} bytes");
    eprintln!(
        "nbdcopy of a 1 GiB thin volume with {data} bytes of data asked for {sparse_read} \
         bytes (with --no-extents: {full_read})"
    );
}

/// The file holds zeros outside `data` ((offset, length, _) ranges).
fn assert_zero_outside(path: &Path, data: &[(u64, u64, u8)]) {
    let mut f = File::open(path).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut at = 0u64;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if let Some(i) = buf[..n].iter().enumerate().position(|(i, &b)| {
            let p = at + i as u64;
            b != 0 && !data.iter().any(|&(o, l, _)| (o..o + l).contains(&p))
        }) {
            panic!("non-zero byte at {} outside the data", at + i as u64);
        }
        at += n as u64;
    }
}

#[test]
fn fio_random_writes_at_qd32_verify_now_and_in_a_verify_only_pass() {
    let (_turn, c) = cluster();
    let dir = tempfile::tempdir().unwrap();
    let u = c.uri("fio");
    let r = run(&mut fio_job(dir.path(), &u, &["--do_verify=1"]), LIMIT);
    assert_fio_clean(&r, 64 * MIB, Some(64 * MIB));
    // A separate process, new connection: verify only.
    let r = run(&mut fio_job(dir.path(), &u, &["--verify_only"]), LIMIT);
    assert_fio_clean(&r, 64 * MIB, None);
}

#[test]
fn fio_verify_passes_after_an_osd_is_killed_and_restarted_mid_write() {
    let (_turn, c) = cluster();
    let dir = tempfile::tempdir().unwrap();
    let u = c.uri("fio-kill");
    // 16,384 writes at most 1,000 a second: a write phase of 16 s or more,
    // long enough to lose an OSD (noticed within the 3 s lease), write
    // without it, and bring it back in the middle.
    let out_path = dir.path().join("fio.json");
    let err_path = dir.path().join("fio.err");
    let mut job = fio_job(dir.path(), &u, &["--do_verify=1", "--rate_iops=1000"]);
    let mut fio = Reaped(
        job.stdin(Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .expect("start fio"),
    );
    thread::sleep(Duration::from_secs(2));
    assert!(fio.running(), "fio ended early");
    c.kill9_osd(1);
    c.wait_status("osd.1 marked down", |s| json_u64s(s, "up") == [2]);
    // Writes go on without it for a while (degraded: osd.1 will need
    // recovery), then it comes back while fio still writes.
    thread::sleep(Duration::from_secs(2));
    assert!(
        fio.running(),
        "fio's write phase ended before osd.1 was restarted"
    );
    c.cli(&["osd", "start", "1"]);
    eprintln!("restarted osd.1 while fio (pid {}) was writing", fio.0.id());
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = fio.0.try_wait().expect("wait for fio") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "fio did not finish within {LIMIT:?}"
        );
        thread::sleep(Duration::from_millis(50));
    };
    let r = Ran {
        cmd: format!("{job:?}"),
        status,
        stdout: fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: fs::read_to_string(&err_path).unwrap_or_default(),
    };
    assert_fio_clean(&r, 64 * MIB, Some(64 * MIB));
    c.wait_healthy("after osd.1 came back");
    // Every block again, from a new process, once recovery is done.
    let r = run(&mut fio_job(dir.path(), &u, &["--verify_only"]), LIMIT);
    assert_fio_clean(&r, 64 * MIB, None);
}

#[test]
fn linux_kernel_nbd_driver_writes_trims_and_verifies_through_the_gateway() {
    // Runs alone: every test of this file holds its turn to the end.
    let (_turn, c) = cluster();
    let r = kernel_nbd_test(c.port(), "kernel");
    assert!(r.stdout.contains("discard accepted"), "{}", r.report());
    // What the kernel left, seen by another client: 16 MiB written at 0
    // with the first MiB then discarded, and the last MiB written.
    let size = size_of("kernel");
    assert_eq!(
        nbd_map(&c.uri("kernel")),
        vec![
            extent(0, MIB, false),
            extent(MIB, 15 * MIB, true),
            extent(16 * MIB, size - 17 * MIB, false),
            extent(size - MIB, MIB, true),
        ]
    );
}

fn simple_reply_bytes(handle: u64, errno: Errno) -> Vec<u8> {
    let mut b = Vec::new();
    encode_simple_reply(&mut b, handle, errno);
    b
}

/// qemu-io writes and reads back a unique pattern, and nbdinfo lists
/// every volume: the gateway still serves new clients.
fn gateway_serves(c: &Cluster, round: u64) {
    let off = 1_000_000 + round * 10_000;
    let pat = 0x10 + round;
    qemu_io_run(
        &c.uri("hostile"),
        &[
            format!("write -P {pat:#x} {off} 5000"),
            format!("read -P {pat:#x} {off} 5000"),
        ],
    );
    let list = run_ok(nbdinfo().args(["--list", &c.base()])).stdout;
    assert_eq!(listed_exports(&list).len(), VOLUMES.len(), "{list}");
}

#[test]
fn bad_input_gets_an_error_or_a_disconnect_and_the_gateway_keeps_serving() {
    let (_turn, c) = cluster();
    let addr = c.addr();
    let size = size_of("hostile");
    // A well-behaved client connected throughout.
    let mut bystander = Raw::connect(addr);
    assert_eq!(bystander.go("hostile", false).0, size);
    let mine = pattern(1, 8192);
    assert_eq!(bystander.write(1, 3 * MIB, &mine), 0);
    let mut round = 0;
    let mut serves = || {
        round += 1;
        gateway_serves(c, round);
    };
    serves();

    // An unknown export: NBD_REP_ERR_UNKNOWN to NBD_OPT_GO, and the same
    // connection can still pick a real one.
    let mut u = Raw::connect(addr);
    let r = u.option(
        OPT_GO,
        &InfoRequest {
            name: "nosuch".into(),
            requests: vec![],
        }
        .encode(),
    );
    assert_eq!(
        r,
        vec![(REP_ERR_UNKNOWN, b"no volume named 'nosuch'".to_vec())]
    );
    assert_eq!(u.go("hostile", false).0, size);

    // Past the end: EINVAL for a read and a trim, ENOSPC for a write (its
    // payload consumed); the connection stays in sync.
    u.request(Command::Read, 0, 1, size - 512, 1024);
    assert_eq!(
        u.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(1, Errno::EINVAL)
    );
    u.request(Command::Write, 0, 2, size - 4096, 8192);
    u.send(&[7u8; 8192]);
    assert_eq!(
        u.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(2, Errno::ENOSPC)
    );
    u.request(Command::Trim, 0, 3, size, 4096);
    assert_eq!(
        u.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(3, Errno::EINVAL)
    );
    u.request(Command::Read, 0, 4, u64::MAX - 100, 4096);
    assert_eq!(
        u.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(4, Errno::EINVAL)
    );
    // Nothing of the refused write landed.
    assert_eq!(u.read(5, size - 4096, 4096), vec![0u8; 4096]);
    u.disconnect();
    serves();

    // Garbage instead of the handshake, and after it: a disconnect.
    let mut g = Raw::connect_bare(addr);
    g.send(b"NOTNBD!!");
    assert!(g.closed_by_server());
    let mut g = Raw::connect(addr);
    g.go("hostile", true);
    g.send(&pattern(5, 4096));
    assert!(g.closed_by_server());
    // A client that vanishes in the middle of a write payload.
    let mut g = Raw::connect(addr);
    g.go("hostile", false);
    g.request(Command::Write, 0, 6, 5 * MIB, 1 << 20);
    g.send(&[9u8; 1000]);
    drop(g);
    serves();

    // The bystander never noticed; nothing of the abandoned write landed.
    assert_eq!(bystander.read(7, 3 * MIB, 8192), mine);
    assert_eq!(bystander.read(8, 5 * MIB, 1 << 20), vec![0u8; 1 << 20]);
    bystander.disconnect();
}

/// qemu-io writes the restart test makes: (pattern, offset, length).
const RESTART_DATA: [(u8, u64, u64); 5] = [
    (0x21, 1000, 3000),
    (0x22, OBJECT - 5000, 10_000),
    (0x23, 10 * MIB + 7, 6 * MIB),
    (0x24, 40 * MIB, 4096),
    (0x25, 96 * MIB - 4096, 4096),
];

#[test]
fn writes_acknowledged_before_a_gateway_sigkill_read_back_through_a_new_gateway() {
    let (_turn, c) = cluster();
    let u = c.uri("restart");
    let cmds: Vec<String> = RESTART_DATA
        .iter()
        .map(|(pat, off, len)| format!("write -P {pat:#x} {off} {len}"))
        .collect();
    qemu_io_run(&u, &cmds);
    // And a raw client's acknowledged write, never flushed, on a
    // connection that is still open when the gateway dies.
    let raw_data = pattern(9, 65536);
    let raw_at = 50 * MIB + 512;
    let mut open = Raw::connect(c.addr());
    open.go("restart", false);
    assert_eq!(open.write(1, raw_at, &raw_data), 0);

    let (old_port, old_pid) = *c.gateway.lock().unwrap();
    assert!(
        cmdline(old_pid).contains(&format!("127.0.0.1:{old_port}")),
        "pid {old_pid} is not this cluster's gateway: {}",
        cmdline(old_pid)
    );
    kill9(old_pid);
    let deadline = Instant::now() + WAIT;
    while alive(old_pid) {
        assert!(Instant::now() < deadline, "the gateway survived SIGKILL");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(open.closed_by_server());
    eprintln!("killed the gateway (pid {old_pid}) with SIGKILL");

    // A new gateway, on a new port, started by hand.
    let port = free_port();
    let log = c.dir.join("log/nbd-replacement.log");
    let out = File::create(&log).unwrap();
    let gw = Process::new(pontoon_bin())
        .args(["nbd", "--listen", &format!("127.0.0.1:{port}"), "--cluster"])
        .arg(&c.dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start pontoon nbd");
    let pid = gw.id();
    // Killed by pid when the tests end (by the watcher), or now if it
    // does not come up.
    let mut pids = File::options()
        .create(true)
        .append(true)
        .open(c.dir.join("gateways.pid"))
        .unwrap();
    writeln!(pids, "{pid}").unwrap();
    let mut gw = Reaped(gw);
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            gw.running(),
            "pontoon nbd exited: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            Instant::now() < deadline,
            "pontoon nbd did not listen within {WAIT:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    // It keeps running: the watcher kills it when the tests end.
    std::mem::forget(gw);
    // From now on it serves the other tests.
    *c.gateway.lock().unwrap() = (port, pid);
    eprintln!("replacement gateway on 127.0.0.1:{port} (pid {pid})");

    let u = c.uri("restart");
    let mut check: Vec<String> = RESTART_DATA
        .iter()
        .map(|(pat, off, len)| format!("read -q -P {pat:#x} {off} {len}"))
        .collect();
    check.push(format!("read -q -P 0 4000 {}", OBJECT - 9000));
    qemu_io_run(&u, &check);
    let mut r = Raw::connect(c.addr());
    r.go("restart", false);
    assert_eq!(r.read(1, raw_at, 65536), raw_data);
    r.disconnect();
    // And it takes new writes.
    qemu_io_run(
        &u,
        &[
            format!("write -P 0x31 {} 5000", 60 * MIB + 3),
            format!("read -P 0x31 {} 5000", 60 * MIB + 3),
        ],
    );
}
