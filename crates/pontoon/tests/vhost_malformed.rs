//! `pontoon vhost` against a hostile guest: a small vhost-user front-end
//! (`vhost_frontend`, standing in for QEMU) serves a volume of a real local
//! cluster and puts malformed descriptor chains in the virtqueue — data
//! outside guest memory, loops, short headers, missing or read-only status
//! bytes, odd lengths, sectors past the end (and ones whose byte offset
//! wraps), unknown request types, bad indirect tables, a bad avail head.
//! Each gets the status the virtio-blk spec asks for (IOERR, UNSUPP) where
//! the back-end can find a status byte, or at least its descriptor chain
//! back; after each, a well-formed 4 KiB write and read-back must still
//! work. A batch of good and bad requests comes back in avail order. A
//! second back-end with `--read-only` on the same volume offers
//! VIRTIO_BLK_F_RO, refuses writes and serves reads. At the end both
//! back-ends are alive and never panicked.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;
mod vhost_frontend;

use common::*;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vhost_frontend::*;

/// Longest a well-formed request may take.
const T: Duration = Duration::from_secs(10);
/// Longest a malformed request may take to come back.
const T_BAD: Duration = Duration::from_secs(5);
const VOLUME_BYTES: u64 = 64 << 20;
const BLOCK: usize = 4096;

/// A `pontoon vhost` process; killed by pid on drop.
struct Backend {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Backend {
    fn start(dir: &Path, socket: &Path, volume: &str, extra: &[&str], log: &Path) -> Backend {
        let err = File::create(log).expect("create backend log");
        let out = err.try_clone().expect("clone log");
        let child = Command::new(PONTOON)
            .arg("vhost")
            .arg("--cluster")
            .arg(dir)
            .arg("--socket")
            .arg(socket)
            .args(["--volume", volume])
            .args(extra)
            .env_remove("PONTOON_CLUSTER")
            .env_remove("PONTOON_ETCD")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("run pontoon vhost");
        Backend {
            child: Some(child),
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the process is still running.
    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Connects a front-end, failing with the back-end's log if it died.
    fn connect(&mut self) -> VhostFrontend {
        let deadline = Instant::now() + WAIT;
        while !self.socket.exists() {
            assert!(
                self.running(),
                "pontoon vhost exited before listening: {}",
                self.log_text()
            );
            assert!(
                Instant::now() < deadline,
                "pontoon vhost did not create {} within {WAIT:?}: {}",
                self.socket.display(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        VhostFrontend::connect(&self.socket, Options::default(), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("front-end setup failed: {e}\n{}", self.log_text()))
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s; returns
    /// whether it exited on SIGTERM.
    fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        signal(child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a malformed request may get back.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exactly this status.
    Status(u8),
    /// This status, or the chain returned with used len 0 and the status
    /// byte untouched (there was no status byte to be found).
    StatusOrDrop(u8),
    /// The chain returned with used len 0; nothing written.
    Drop,
    /// Anything, as long as the chain comes back.
    Returned,
}

/// The run's findings: every case is checked and the test fails at the
/// end with all failures listed.
struct Run {
    failures: Vec<String>,
    passed: Vec<String>,
    notes: Vec<String>,
}

impl Run {
    fn check(&mut self, case: &str, ok: bool, what: impl Into<String>) {
        let what = what.into();
        if ok {
            self.passed.push(format!("{case}: {what}"));
        } else {
            eprintln!("FAIL {case}: {what}");
            self.failures.push(format!("{case}: {what}"));
        }
    }

    fn note(&mut self, case: &str, what: impl Into<String>) {
        let what = what.into();
        eprintln!("note {case}: {what}");
        self.notes.push(format!("{case}: {what}"));
    }
}

/// Total device-writable bytes of a direct chain.
fn writable_bytes(descs: &[Desc]) -> u64 {
    descs
        .iter()
        .filter(|d| d.flags & VIRTQ_DESC_F_WRITE != 0)
        .map(|d| u64::from(d.len))
        .sum()
}

/// Submits a malformed `descs` (status byte, if any, at `status_at`) and
/// checks the outcome against `expect`.
fn bad(
    run: &mut Run,
    fe: &mut VhostFrontend,
    case: &str,
    descs: &[Desc],
    status_at: u64,
    expect: Expect,
) -> Outcome {
    let out = fe.request(descs, status_at, T_BAD);
    eprintln!("{case}: {out:?}");
    let Some(used) = out.used else {
        run.check(
            case,
            false,
            format!("the chain never came back (no used element within {T_BAD:?})"),
        );
        return out;
    };
    run.check(
        case,
        used.id == u32::from(out.head),
        format!("used id {} is the request's head {}", used.id, out.head),
    );
    let max = writable_bytes(descs);
    run.check(
        case,
        u64::from(used.len) <= max,
        format!("used len {} <= its {max} writable bytes", used.len),
    );
    let dropped = used.len == 0 && out.status == STATUS_UNTOUCHED;
    let (ok, want) = match expect {
        Expect::Status(s) => (out.status == s, format!("status {s}")),
        Expect::StatusOrDrop(s) => (
            out.status == s || dropped,
            format!("status {s} or dropped with len 0"),
        ),
        Expect::Drop => (dropped, "dropped with len 0, nothing written".into()),
        Expect::Returned => (true, "returned".into()),
    };
    run.check(
        case,
        ok,
        format!(
            "{want} (got status {:#x}, used len {})",
            out.status, used.len
        ),
    );
    if out.used.is_some() && !out.notified {
        run.note(case, "completed without a call eventfd signal");
    }
    out
}

/// A well-formed 4 KiB write and read-back of a pattern for `seed` at a
/// block of its own: the back-end still serves.
fn responsive(run: &mut Run, fe: &mut VhostFrontend, after: &str, seed: u64) {
    let sector = 8 * (2048 + seed);
    let data = pattern(seed, BLOCK);
    let w = fe.blk_write(Slot(15), sector, &data, T);
    let (r, back) = fe.blk_read(Slot(15), sector, BLOCK, T);
    let ok = w.status == VIRTIO_BLK_S_OK
        && r.status == VIRTIO_BLK_S_OK
        && back == data
        && w.used.is_some_and(|u| u.id == u32::from(w.head))
        && r.used.is_some_and(|u| u.id == u32::from(r.head));
    run.check(
        &format!("{after} / responsive"),
        ok,
        format!(
            "4 KiB write {:?} status {:#x}, read {:?} status {:#x}, data equal {}",
            w.used,
            w.status,
            r.used,
            r.status,
            back == data
        ),
    );
    if ok && !(w.notified && r.notified) {
        run.note(
            after,
            "a well-formed request completed without a call signal",
        );
    }
}

#[test]
fn vhost_backend_survives_malformed_descriptors() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-vhost-bad-");
    let dir = dir.as_path();
    // Unix socket paths are short (108 bytes): their own short tempdir.
    let (_stmp, sockdir) = tempdir("pvh-");
    let _up = Up::start(dir, &[]);
    eprintln!("cluster ready after {:?}", started.elapsed());
    ok(dir, &["pool", "create", "p", "--size", "1", "--pgs", "8"]);
    ok(dir, &["volume", "create", "v", "--size", "64M"]);

    let mut rw = Backend::start(
        dir,
        &sockdir.join("rw.sock"),
        "v",
        &[],
        &dir.join("vhost-rw.log"),
    );
    let mut fe = rw.connect();
    eprintln!(
        "connected after {:?}: features {:#x} acked {:#x} protocol {:?} queues {} config {:02x?}",
        started.elapsed(),
        fe.offered,
        fe.acked,
        fe.proto_offered,
        fe.queue_num,
        fe.config
    );
    let mut run = Run {
        failures: Vec::new(),
        passed: Vec::new(),
        notes: Vec::new(),
    };

    // ---- what the device offers ----
    for (name, bit) in [
        ("VERSION_1", VIRTIO_F_VERSION_1),
        ("PROTOCOL_FEATURES", VHOST_USER_F_PROTOCOL_FEATURES),
        ("BLK_SIZE", VIRTIO_BLK_F_BLK_SIZE),
        ("SEG_MAX", VIRTIO_BLK_F_SEG_MAX),
        ("FLUSH", VIRTIO_BLK_F_FLUSH),
        ("MQ", VIRTIO_BLK_F_MQ),
        ("DISCARD", VIRTIO_BLK_F_DISCARD),
        ("WRITE_ZEROES", VIRTIO_BLK_F_WRITE_ZEROES),
        ("EVENT_IDX", VIRTIO_RING_F_EVENT_IDX),
    ] {
        run.check("features", fe.offers(bit), format!("{name} offered"));
    }
    run.check(
        "features",
        !fe.offers(VIRTIO_BLK_F_RO),
        "RO not offered without --read-only",
    );
    run.check(
        "features",
        fe.proto_offered.contains(
            vhost::vhost_user::VhostUserProtocolFeatures::MQ
                | vhost::vhost_user::VhostUserProtocolFeatures::CONFIG,
        ),
        format!(
            "protocol features MQ and CONFIG offered ({:?})",
            fe.proto_offered
        ),
    );
    let capacity = fe.capacity().expect("config space has the capacity");
    run.check(
        "config",
        capacity == VOLUME_BYTES / 512,
        format!("capacity {capacity} sectors = 64 MiB"),
    );
    run.check(
        "config",
        fe.config_u32(20) == Some(BLOCK as u32),
        format!("blk_size {:?} = 4096", fe.config_u32(20)),
    );
    run.check(
        "config",
        fe.config_u32(12).is_some_and(|n| n > 0),
        format!("seg_max {:?} > 0", fe.config_u32(12)),
    );
    let indirect = fe.offers(VIRTIO_RING_F_INDIRECT_DESC);
    let s = Slot(0);

    // ---- 1: good write, good read ----
    let c1 = 8 * 100;
    let data1 = pattern(1, BLOCK);
    let w = fe.blk_write(s, c1, &data1, T);
    run.check(
        "1 write",
        w.status == VIRTIO_BLK_S_OK && w.used.is_some(),
        format!("{w:?}"),
    );
    run.check(
        "1 write",
        w.used.is_some_and(|u| u.len == 1),
        format!(
            "used len {:?} is 1 (the status byte)",
            w.used.map(|u| u.len)
        ),
    );
    run.check("1 write", w.notified, "call eventfd signalled");
    let (r, back) = fe.blk_read(s, c1, BLOCK, T);
    run.check(
        "1 read",
        r.status == VIRTIO_BLK_S_OK && back == data1,
        format!("status {:#x}, data equal {}", r.status, back == data1),
    );
    run.check(
        "1 read",
        r.used.is_some_and(|u| u.len == BLOCK as u32 + 1),
        format!("used len {:?} is 4097", r.used.map(|u| u.len)),
    );
    // Data spread over several descriptors, and a flush.
    let data12 = pattern(12, 3 * BLOCK);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 8));
    fe.write(s.data(), &data12);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), 1024),
        Desc::ro(s.data() + 1024, 7168),
        Desc::ro(s.data() + 8192, 4096),
        Desc::wo(s.status(), 1),
    ]);
    let w = fe.request(&descs, s.status(), T);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1 + 8));
    fe.fill(s.data(), 3 * BLOCK, 0);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(s.data(), 6144),
        Desc::wo(s.data() + 6144, 6144),
        Desc::wo(s.status(), 1),
    ]);
    let r = fe.request(&descs, s.status(), T);
    let back = fe.read(s.data(), 3 * BLOCK);
    run.check(
        "1 multi-descriptor",
        w.status == VIRTIO_BLK_S_OK && r.status == VIRTIO_BLK_S_OK && back == data12,
        format!(
            "12 KiB write in 3 descriptors {:#x}, read in 2 {:#x}, equal {}",
            w.status,
            r.status,
            back == data12
        ),
    );
    let f = fe.blk_nodata(s, VIRTIO_BLK_T_FLUSH, T);
    run.check("1 flush", f.status == VIRTIO_BLK_S_OK, format!("{f:?}"));
    if fe.offers(VIRTIO_BLK_F_WRITE_ZEROES) {
        let z = fe.blk_segments(
            s,
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[blk_segment(c1 + 8, 8, 0)],
            T,
        );
        let (_, back) = fe.blk_read(s, c1 + 8, BLOCK, T);
        run.check(
            "1 write-zeroes",
            z.status == VIRTIO_BLK_S_OK && back.iter().all(|&b| b == 0),
            format!(
                "status {:#x}, zeroes {}",
                z.status,
                back.iter().all(|&b| b == 0)
            ),
        );
    }
    if fe.offers(VIRTIO_BLK_F_DISCARD) {
        let d = fe.blk_segments(s, VIRTIO_BLK_T_DISCARD, &[blk_segment(c1 + 16, 8, 0)], T);
        run.check("1 discard", d.status == VIRTIO_BLK_S_OK, format!("{d:?}"));
    }
    responsive(&mut run, &mut fe, "1", 1);

    // ---- 2: data outside guest memory ----
    let far = [
        (
            "2a write, data 64 MiB past the end",
            VIRTIO_BLK_T_OUT,
            MEM_END + (64 << 20),
        ),
        (
            "2b read, data across the end",
            VIRTIO_BLK_T_IN,
            MEM_END - 2048,
        ),
        (
            "2c write, data address wraps u64",
            VIRTIO_BLK_T_OUT,
            u64::MAX - 1023,
        ),
        (
            "2d read, data at 2^48 - 4096",
            VIRTIO_BLK_T_IN,
            (1 << 48) - 4096,
        ),
    ];
    for (i, (case, kind, addr)) in far.into_iter().enumerate() {
        fe.write(s.hdr(), &blk_header(kind, c1));
        let data = if kind == VIRTIO_BLK_T_OUT {
            Desc::ro(addr, BLOCK as u32)
        } else {
            Desc::wo(addr, BLOCK as u32)
        };
        let descs = chain(&[Desc::ro(s.hdr(), 16), data, Desc::wo(s.status(), 1)]);
        bad(
            &mut run,
            &mut fe,
            case,
            &descs,
            s.status(),
            Expect::Status(VIRTIO_BLK_S_IOERR),
        );
        responsive(&mut run, &mut fe, case, 20 + i as u64);
    }
    // The header outside guest memory: the status byte is still there.
    let descs = chain(&[
        Desc::ro(MEM_END + 4096, 16),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::wo(s.status(), 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "2e header outside memory",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    responsive(&mut run, &mut fe, "2e", 25);
    // The status byte outside guest memory: nowhere to answer.
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::wo(MEM_END + 4096, 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "2f status outside memory",
        &descs,
        s.status(),
        Expect::Returned,
    );
    responsive(&mut run, &mut fe, "2f", 26);
    // Legal: one data buffer spanning the two memory regions.
    let span = REGION_B.0 - 2048;
    let data2 = pattern(27, BLOCK);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 24));
    fe.write(span, &data2);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(span, BLOCK as u32),
        Desc::wo(s.status(), 1),
    ]);
    let w = fe.request(&descs, s.status(), T);
    fe.fill(span, BLOCK, 0);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1 + 24));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(span, BLOCK as u32),
        Desc::wo(s.status(), 1),
    ]);
    let r = fe.request(&descs, s.status(), T);
    let back = fe.read(span, BLOCK);
    run.check(
        "2g data spanning both memory regions (legal)",
        w.status == VIRTIO_BLK_S_OK && r.status == VIRTIO_BLK_S_OK && back == data2,
        format!(
            "write {:#x}, read {:#x}, equal {}",
            w.status,
            r.status,
            back == data2
        ),
    );

    // ---- 3: loops and bad next indices ----
    let t0 = Instant::now();
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    let descs = [
        Desc::ro(s.hdr(), 16).then(Next::Follow),
        Desc::ro(s.data(), BLOCK as u32).then(Next::Follow),
        Desc::wo(s.status(), 1).then(Next::Rel(0)),
    ];
    bad(
        &mut run,
        &mut fe,
        "3a chain loops back to its head",
        &descs,
        s.status(),
        Expect::StatusOrDrop(VIRTIO_BLK_S_IOERR),
    );
    responsive(&mut run, &mut fe, "3a", 30);
    let descs = [Desc::ro(s.hdr(), 16).then(Next::Rel(0))];
    bad(
        &mut run,
        &mut fe,
        "3b descriptor is its own next",
        &descs,
        s.status(),
        Expect::Drop,
    );
    responsive(&mut run, &mut fe, "3b", 31);
    let descs = [
        Desc::ro(s.hdr(), 16).then(Next::Follow),
        Desc::ro(s.data(), BLOCK as u32).then(Next::Raw(0xfff0)),
    ];
    bad(
        &mut run,
        &mut fe,
        "3c next index past the table",
        &descs,
        s.status(),
        Expect::Drop,
    );
    responsive(&mut run, &mut fe, "3c", 32);
    run.check(
        "3",
        t0.elapsed() < 3 * T,
        format!("loops took {:?} in all", t0.elapsed()),
    );

    // ---- 4: header too short / missing / wrong direction ----
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1));
    let descs = chain(&[Desc::ro(s.hdr(), 8), Desc::wo(s.status(), 1)]);
    bad(
        &mut run,
        &mut fe,
        "4a 8-byte header",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    responsive(&mut run, &mut fe, "4a", 40);
    let descs = [Desc::wo(s.status(), 1)];
    bad(
        &mut run,
        &mut fe,
        "4b no header at all",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    responsive(&mut run, &mut fe, "4b", 41);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    let descs = chain(&[
        Desc::wo(s.hdr(), 16),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::wo(s.status(), 1),
    ]);
    // The status byte is the last byte of the chain's last device-writable
    // descriptor, not of the first one a parse gave up at.
    let hdr_before = fe.read(s.hdr(), 16);
    bad(
        &mut run,
        &mut fe,
        "4c header device-writable",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    let hdr_after = fe.read(s.hdr(), 16);
    run.check(
        "4c header device-writable",
        hdr_after == hdr_before,
        format!("header left alone (before {hdr_before:02x?}, after {hdr_after:02x?})"),
    );
    responsive(&mut run, &mut fe, "4c", 42);
    // Legal in VERSION_1 (any layout): the header split over two
    // descriptors.
    let data4 = pattern(43, BLOCK);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 32));
    fe.write(s.data(), &data4);
    let descs = chain(&[
        Desc::ro(s.hdr(), 8),
        Desc::ro(s.hdr() + 8, 8),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::wo(s.status(), 1),
    ]);
    let o = fe.request(&descs, s.status(), T);
    if o.status == VIRTIO_BLK_S_OK {
        let (_, back) = fe.blk_read(s, c1 + 32, BLOCK, T);
        run.check(
            "4d header split 8+8 (legal)",
            back == data4,
            "served, data equal",
        );
    } else {
        run.check(
            "4d header split 8+8 (legal)",
            o.used.is_some() && o.status == VIRTIO_BLK_S_IOERR,
            format!("refused with {:#x} ({o:?})", o.status),
        );
        run.note(
            "4d",
            "a header split over two descriptors is refused (VERSION_1 allows any layout)",
        );
    }
    responsive(&mut run, &mut fe, "4d", 43);

    // ---- 5: status byte missing or not device-writable ----
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    fe.write(s.data(), &data1);
    let descs = chain(&[Desc::ro(s.hdr(), 16), Desc::ro(s.data(), BLOCK as u32)]);
    bad(
        &mut run,
        &mut fe,
        "5a no writable descriptor",
        &descs,
        s.status(),
        Expect::Drop,
    );
    responsive(&mut run, &mut fe, "5a", 50);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::ro(s.status(), 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "5b status descriptor device-readable (write)",
        &descs,
        s.status(),
        Expect::Drop,
    );
    responsive(&mut run, &mut fe, "5b", 51);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(s.data(), BLOCK as u32),
        Desc::ro(s.status(), 1),
    ]);
    let o = bad(
        &mut run,
        &mut fe,
        "5c status descriptor device-readable (read)",
        &descs,
        s.status(),
        Expect::Returned,
    );
    run.check(
        "5c status descriptor device-readable (read)",
        o.status == STATUS_UNTOUCHED,
        format!("device-readable status byte untouched ({:#x})", o.status),
    );
    responsive(&mut run, &mut fe, "5c", 52);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), BLOCK as u32),
        Desc::wo(s.status(), 0),
    ]);
    bad(
        &mut run,
        &mut fe,
        "5d status descriptor of length 0",
        &descs,
        s.status(),
        Expect::Drop,
    );
    responsive(&mut run, &mut fe, "5d", 53);
    // What 5a-5d aimed at is unchanged.
    let (_, back) = fe.blk_read(s, c1, BLOCK, T);
    run.check("5 data", back == data1, "refused writes changed nothing");

    // ---- 6: data lengths ----
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    fe.write(s.data(), &pattern(60, 1000));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), 1000),
        Desc::wo(s.status(), 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "6a write of 1000 bytes",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    responsive(&mut run, &mut fe, "6a", 60);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1));
    fe.fill(s.data(), BLOCK, 0xee);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(s.data(), 1000),
        Desc::wo(s.status(), 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "6b read of 1000 bytes",
        &descs,
        s.status(),
        Expect::Status(VIRTIO_BLK_S_IOERR),
    );
    run.check(
        "6b read of 1000 bytes",
        fe.read(s.data() + 1000, BLOCK - 1000)
            .iter()
            .all(|&b| b == 0xee),
        "nothing written past the 1000-byte buffer",
    );
    responsive(&mut run, &mut fe, "6b", 61);
    let (_, back) = fe.blk_read(s, c1, BLOCK, T);
    run.check(
        "6 data",
        back == data1,
        "the refused 1000-byte write changed nothing",
    );
    // 512 bytes at a sector that is not block-aligned: the spec's unit is
    // 512; BLK_SIZE is only a hint. Served or refused, never corrupting.
    let old = pattern(62, BLOCK);
    fe.blk_write(s, c1 + 40, &old, T);
    let small = pattern(63, 512);
    let o = fe.blk_write(s, c1 + 40 + 3, &small, T);
    let (_, back) = fe.blk_read(s, c1 + 40, BLOCK, T);
    let mut want = old.clone();
    if o.status == VIRTIO_BLK_S_OK {
        want[1536..2048].copy_from_slice(&small);
    }
    run.check(
        "6c 512 bytes at sector 3 of a block",
        o.used.is_some()
            && (o.status == VIRTIO_BLK_S_OK || o.status == VIRTIO_BLK_S_IOERR)
            && back == want,
        format!(
            "status {:#x}; block holds {}",
            o.status,
            if back == want {
                "what it should"
            } else {
                "something else"
            }
        ),
    );
    if o.status != VIRTIO_BLK_S_OK {
        run.note(
            "6c",
            format!("a 512-byte write is refused ({:#x})", o.status),
        );
    }
    responsive(&mut run, &mut fe, "6c", 62);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1));
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::ro(s.data(), 0),
        Desc::wo(s.status(), 1),
    ]);
    bad(
        &mut run,
        &mut fe,
        "6d zero-length data descriptor",
        &descs,
        s.status(),
        Expect::Returned,
    );
    responsive(&mut run, &mut fe, "6d", 63);

    // ---- 7: sectors past the end ----
    let (r, _) = fe.blk_read(s, capacity, BLOCK, T_BAD);
    run.check(
        "7a read at sector = capacity",
        r.status == VIRTIO_BLK_S_IOERR,
        format!("status {:#x}", r.status),
    );
    let (r, _) = fe.blk_read(s, capacity - 4, BLOCK, T_BAD);
    run.check(
        "7b read straddling the end",
        r.status == VIRTIO_BLK_S_IOERR,
        format!("status {:#x}", r.status),
    );
    let last = pattern(70, BLOCK);
    fe.blk_write(s, capacity - 8, &last, T);
    let w = fe.blk_write(s, capacity - 4, &pattern(71, BLOCK), T_BAD);
    let (_, back) = fe.blk_read(s, capacity - 8, BLOCK, T);
    run.check(
        "7c write straddling the end",
        w.status == VIRTIO_BLK_S_IOERR && back == last,
        format!(
            "status {:#x}, last block unchanged {}",
            w.status,
            back == last
        ),
    );
    responsive(&mut run, &mut fe, "7c", 72);
    // A sector whose byte offset wraps to 0 (2^55 * 512 = 2^64).
    let first = pattern(73, BLOCK);
    fe.blk_write(s, 0, &first, T);
    let w = fe.blk_write(s, 1 << 55, &pattern(74, BLOCK), T_BAD);
    let (r, _) = fe.blk_read(s, (1 << 55) + 8, BLOCK, T_BAD);
    let w2 = fe.blk_write(s, u64::MAX - 7, &pattern(75, BLOCK), T_BAD);
    let (_, back) = fe.blk_read(s, 0, BLOCK, T);
    run.check(
        "7d sectors whose byte offset wraps",
        w.status == VIRTIO_BLK_S_IOERR
            && r.status == VIRTIO_BLK_S_IOERR
            && w2.status == VIRTIO_BLK_S_IOERR
            && back == first,
        format!(
            "write 2^55 {:#x}, read 2^55+8 {:#x}, write 2^64-8 {:#x}, sector 0 unchanged {}",
            w.status,
            r.status,
            w2.status,
            back == first
        ),
    );
    responsive(&mut run, &mut fe, "7d", 74);
    if fe.offers(VIRTIO_BLK_F_WRITE_ZEROES) {
        let z1 = fe.blk_segments(
            s,
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[blk_segment(capacity - 4, 8, 0)],
            T_BAD,
        );
        let z2 = fe.blk_segments(
            s,
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[blk_segment(1 << 55, 8, 0)],
            T_BAD,
        );
        let z3 = fe.blk_segments(
            s,
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[blk_segment(8, u32::MAX, 0)],
            T_BAD,
        );
        let (_, b0) = fe.blk_read(s, 0, BLOCK, T);
        let (_, bl) = fe.blk_read(s, capacity - 8, BLOCK, T);
        run.check(
            "7e write-zeroes past the end",
            [z1.status, z2.status, z3.status]
                .iter()
                .all(|&s| s == VIRTIO_BLK_S_IOERR)
                && b0 == first
                && bl == last,
            format!(
                "straddling {:#x}, at 2^55 {:#x}, 2^32-1 sectors {:#x}; first and last blocks unchanged {}",
                z1.status,
                z2.status,
                z3.status,
                b0 == first && bl == last
            ),
        );
        responsive(&mut run, &mut fe, "7e", 75);
    }
    if fe.offers(VIRTIO_BLK_F_DISCARD) {
        let d1 = fe.blk_segments(
            s,
            VIRTIO_BLK_T_DISCARD,
            &[blk_segment(1 << 55, 8, 0)],
            T_BAD,
        );
        // A segment list that is not a whole number of segments.
        fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_DISCARD, 0));
        fe.write(s.scratch(), &blk_segment(c1, 8, 0));
        let descs = chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::ro(s.scratch(), 10),
            Desc::wo(s.status(), 1),
        ]);
        let d2 = fe.request(&descs, s.status(), T_BAD);
        let (_, b0) = fe.blk_read(s, 0, BLOCK, T);
        let (_, b1) = fe.blk_read(s, c1, BLOCK, T);
        run.check(
            "7f discard past the end / truncated segment",
            d1.status == VIRTIO_BLK_S_IOERR
                && d2.status == VIRTIO_BLK_S_IOERR
                && b0 == first
                && b1 == data1,
            format!(
                "at 2^55 {:#x}, 10-byte segment {:#x}; data unchanged {}",
                d1.status,
                d2.status,
                b0 == first && b1 == data1
            ),
        );
        responsive(&mut run, &mut fe, "7f", 76);
    }

    // ---- 8: unknown request types ----
    for (i, kind) in [99u32, 2, 0xffff_ffff].into_iter().enumerate() {
        fe.write(s.hdr(), &blk_header(kind, c1));
        let descs = chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::ro(s.data(), BLOCK as u32),
            Desc::wo(s.status(), 1),
        ]);
        let case = format!("8 request type {kind}");
        bad(
            &mut run,
            &mut fe,
            &case,
            &descs,
            s.status(),
            Expect::Status(VIRTIO_BLK_S_UNSUPP),
        );
        responsive(&mut run, &mut fe, &case, 80 + i as u64);
    }

    // ---- 9: GET_ID ----
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_GET_ID, 0));
    fe.fill(s.scratch(), 64, 0xee);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(s.scratch(), 20),
        Desc::wo(s.status(), 1),
    ]);
    let o = fe.request(&descs, s.status(), T);
    let id = fe.read(s.scratch(), 20);
    let serial: Vec<u8> = id.iter().copied().take_while(|&b| b != 0).collect();
    eprintln!("GET_ID: {o:?} {:?}", String::from_utf8_lossy(&serial));
    run.check(
        "9 GET_ID",
        o.status == VIRTIO_BLK_S_OK
            && !serial.is_empty()
            && serial.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
            && fe.read(s.scratch() + 20, 44).iter().all(|&b| b == 0xee),
        format!(
            "status {:#x}, serial {:?}, nothing past 20 bytes",
            o.status,
            String::from_utf8_lossy(&serial)
        ),
    );
    // A buffer shorter than 20 bytes: truncated or refused, never
    // overrun.
    fe.fill(s.scratch(), 64, 0xee);
    let descs = chain(&[
        Desc::ro(s.hdr(), 16),
        Desc::wo(s.scratch(), 8),
        Desc::wo(s.status(), 1),
    ]);
    let o = bad(
        &mut run,
        &mut fe,
        "9b GET_ID into 8 bytes",
        &descs,
        s.status(),
        Expect::Returned,
    );
    run.check(
        "9b GET_ID into 8 bytes",
        (o.status == VIRTIO_BLK_S_OK || o.status == VIRTIO_BLK_S_IOERR)
            && fe.read(s.scratch() + 8, 56).iter().all(|&b| b == 0xee),
        format!("status {:#x}, nothing past the 8 bytes", o.status),
    );
    responsive(&mut run, &mut fe, "9b", 91);

    // ---- 11: indirect descriptors ----
    let table = s.scratch();
    if indirect {
        let data11 = pattern(110, BLOCK);
        fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 48));
        fe.write(s.data(), &data11);
        let len = fe.place_indirect(
            table,
            &chain(&[
                Desc::ro(s.hdr(), 16),
                Desc::ro(s.data(), BLOCK as u32),
                Desc::wo(s.status(), 1),
            ]),
        );
        let o = fe.request(&[Desc::indirect(table, len)], s.status(), T);
        let (_, back) = fe.blk_read(s, c1 + 48, BLOCK, T);
        run.check(
            "11a good indirect write",
            o.status == VIRTIO_BLK_S_OK && back == data11,
            format!("status {:#x}, equal {}", o.status, back == data11),
        );
    } else {
        run.note(
            "11",
            "VIRTIO_RING_F_INDIRECT_DESC not offered; bad tables sent anyway",
        );
    }
    let o = fe.request(&[Desc::indirect(MEM_END + 4096, 48)], s.status(), T_BAD);
    eprintln!("11b: {o:?}");
    run.check(
        "11b indirect table outside memory",
        o.used.is_some_and(|u| u.len == 0) && o.status == STATUS_UNTOUCHED,
        format!("returned with len 0 ({o:?})"),
    );
    responsive(&mut run, &mut fe, "11b", 111);
    fe.write(s.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 48));
    let len = fe.place_indirect(
        table,
        &chain(&[
            Desc::ro(s.hdr(), 16),
            Desc::ro(MEM_END + (1 << 20), BLOCK as u32),
            Desc::wo(s.status(), 1),
        ]),
    );
    let o = fe.request(&[Desc::indirect(table, len)], s.status(), T_BAD);
    eprintln!("11c: {o:?}");
    run.check(
        "11c indirect table whose data is outside memory",
        o.used.is_some()
            && (o.status == VIRTIO_BLK_S_IOERR || (!indirect && o.status == STATUS_UNTOUCHED)),
        format!("IOERR ({o:?})"),
    );
    responsive(&mut run, &mut fe, "11c", 112);
    for (i, (case, desc)) in [
        (
            "11d indirect length not a multiple of 16",
            Desc::indirect(table, 40),
        ),
        ("11e indirect length 0", Desc::indirect(table, 0)),
        (
            "11f indirect table larger than the queue",
            Desc::indirect(table, 16 * (u32::from(fe.queue_size()) + 1)),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let o = fe.request(&[desc], s.status(), T_BAD);
        eprintln!("{case}: {o:?}");
        run.check(
            case,
            o.used.is_some() && o.status != VIRTIO_BLK_S_OK,
            format!("returned, not OK ({o:?})"),
        );
        responsive(&mut run, &mut fe, case, 113 + i as u64);
    }
    // An indirect descriptor inside an indirect table.
    let len = fe.place_indirect(table, &[Desc::indirect(table + 512, 48)]);
    let o = fe.request(&[Desc::indirect(table, len)], s.status(), T_BAD);
    eprintln!("11g: {o:?}");
    run.check(
        "11g nested indirect table",
        o.used.is_some() && o.status != VIRTIO_BLK_S_OK,
        format!("returned, not OK ({o:?})"),
    );
    responsive(&mut run, &mut fe, "11g", 117);
    if indirect {
        // More data segments than seg_max (an indirect table may hold more
        // descriptors than the queue): refused, and nothing written.
        let seg_max = fe.config_u32(12).unwrap_or(126);
        let segs = (seg_max as usize + 34).next_multiple_of(16);
        let data = pattern(118, segs * 256);
        let big = Slot(14);
        fe.write(big.hdr(), &blk_header(VIRTIO_BLK_T_OUT, c1 + 56));
        fe.write(big.data(), &data);
        let mut descs = vec![Desc::ro(big.hdr(), 16)];
        descs.extend((0..segs).map(|i| Desc::ro(big.data() + 256 * i as u64, 256)));
        descs.push(Desc::wo(big.status(), 1));
        let at = Slot(13).data();
        let len = fe.place_indirect(at, &chain(&descs));
        let before = fe.blk_read(s, c1 + 56, BLOCK, T).1;
        let o = fe.request(&[Desc::indirect(at, len)], big.status(), T_BAD);
        eprintln!("11h: {o:?}");
        let after = fe.blk_read(s, c1 + 56, BLOCK, T).1;
        run.check(
            "11h indirect chain of more than seg_max segments",
            o.used.is_some() && o.status == VIRTIO_BLK_S_IOERR && before == after,
            format!(
                "{segs} segments of 256 bytes (seg_max {seg_max}): status {:#x} (IOERR), \
                 nothing written {} ({o:?})",
                o.status,
                before == after
            ),
        );
        responsive(&mut run, &mut fe, "11h", 118);
    }

    // ---- 12: a batch of good and bad requests, one kick: avail order ----
    let batch_sector = |k: u64| c1 + 64 + 8 * k;
    let mut heads = Vec::new();
    let mut wants = Vec::new();
    for k in 0..10u64 {
        let sl = Slot(k);
        fe.write(sl.status(), &[STATUS_UNTOUCHED]);
        let (descs, want) = match k % 5 {
            0 | 3 => {
                fe.write(sl.hdr(), &blk_header(VIRTIO_BLK_T_OUT, batch_sector(k)));
                fe.write(sl.data(), &pattern(120 + k, BLOCK));
                (
                    chain(&[
                        Desc::ro(sl.hdr(), 16),
                        Desc::ro(sl.data(), BLOCK as u32),
                        Desc::wo(sl.status(), 1),
                    ]),
                    VIRTIO_BLK_S_OK,
                )
            }
            1 => {
                fe.write(sl.hdr(), &blk_header(77, 0));
                (
                    chain(&[Desc::ro(sl.hdr(), 16), Desc::wo(sl.status(), 1)]),
                    VIRTIO_BLK_S_UNSUPP,
                )
            }
            2 => {
                fe.write(sl.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1));
                (
                    chain(&[
                        Desc::ro(sl.hdr(), 16),
                        Desc::wo(MEM_END + 8192, BLOCK as u32),
                        Desc::wo(sl.status(), 1),
                    ]),
                    VIRTIO_BLK_S_IOERR,
                )
            }
            _ => {
                fe.write(sl.hdr(), &blk_header(VIRTIO_BLK_T_IN, c1));
                (
                    chain(&[
                        Desc::ro(sl.hdr(), 16),
                        Desc::wo(sl.data(), BLOCK as u32),
                        Desc::wo(sl.status(), 1),
                    ]),
                    VIRTIO_BLK_S_OK,
                )
            }
        };
        heads.push(fe.push(&descs));
        wants.push(want);
    }
    fe.kick();
    let mut ids = Vec::new();
    let deadline = Instant::now() + T;
    while ids.len() < heads.len() && Instant::now() < deadline {
        if let Some(u) = fe.next_used(deadline - Instant::now()) {
            ids.push(u.id as u16);
        }
    }
    let statuses: Vec<u8> = (0..10).map(|k| fe.read(Slot(k).status(), 1)[0]).collect();
    run.check(
        "12 batch",
        ids == heads,
        format!("used order {ids:?} = avail order {heads:?}"),
    );
    run.check(
        "12 batch",
        statuses == wants,
        format!("statuses {statuses:?} = {wants:?}"),
    );
    run.check(
        "12 batch",
        fe.take_notified(Duration::from_secs(2)),
        "call eventfd signalled",
    );
    for k in [0u64, 3, 5, 8] {
        let (_, back) = fe.blk_read(Slot(k), batch_sector(k), BLOCK, T);
        run.check(
            "12 batch",
            back == pattern(120 + k, BLOCK),
            format!("batch write {k} reads back"),
        );
    }
    for k in [4u64, 9] {
        run.check(
            "12 batch",
            fe.read(Slot(k).data(), BLOCK) == data1,
            format!("batch read {k} got the data"),
        );
    }
    responsive(&mut run, &mut fe, "12", 120);

    // ---- 10: a read-only back-end on the same volume ----
    let mut ro = Backend::start(
        dir,
        &sockdir.join("ro.sock"),
        "v",
        &["--read-only"],
        &dir.join("vhost-ro.log"),
    );
    let mut rofe = ro.connect();
    run.check(
        "10 read-only",
        rofe.offers(VIRTIO_BLK_F_RO),
        format!("RO offered (features {:#x})", rofe.offered),
    );
    run.check(
        "10 read-only",
        rofe.acked & VIRTIO_BLK_F_RO != 0,
        "RO acknowledged",
    );
    run.check(
        "10 read-only",
        rofe.capacity() == Some(capacity),
        format!("config capacity {:?}", rofe.capacity()),
    );
    let w = rofe.blk_write(s, c1, &pattern(100, BLOCK), T_BAD);
    run.check(
        "10 read-only write",
        w.used.is_some() && w.status == VIRTIO_BLK_S_IOERR,
        format!("{w:?}"),
    );
    let (r, back) = rofe.blk_read(s, c1, BLOCK, T);
    run.check(
        "10 read-only read",
        r.status == VIRTIO_BLK_S_OK && back == data1,
        format!(
            "status {:#x}, the data the other back-end wrote {}",
            r.status,
            back == data1
        ),
    );
    if rofe.offers(VIRTIO_BLK_F_WRITE_ZEROES) {
        let z = rofe.blk_segments(
            s,
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[blk_segment(c1, 8, 0)],
            T_BAD,
        );
        run.check(
            "10 read-only write-zeroes",
            z.status == VIRTIO_BLK_S_IOERR,
            format!("{z:?}"),
        );
    }
    if rofe.offers(VIRTIO_BLK_F_DISCARD) {
        let d = rofe.blk_segments(s, VIRTIO_BLK_T_DISCARD, &[blk_segment(c1, 8, 0)], T_BAD);
        run.check(
            "10 read-only discard",
            d.status == VIRTIO_BLK_S_IOERR,
            format!("{d:?}"),
        );
    }
    let (r, back) = rofe.blk_read(s, c1, BLOCK, T);
    run.check(
        "10 read-only",
        r.status == VIRTIO_BLK_S_OK && back == data1,
        "refused writes changed nothing; still serving",
    );
    let (_, back) = fe.blk_read(s, c1, BLOCK, T);
    run.check("10 read-only", back == data1, "the read-write view agrees");

    // ---- 13 (last: it may leave the queue in a state of its own): an
    // avail entry naming a descriptor index past the table ----
    fe.write(s.status(), &[STATUS_UNTOUCHED]);
    fe.make_available(fe.queue_size() + 7);
    fe.kick();
    let u = fe.next_used(Duration::from_secs(2));
    eprintln!("13: used {u:?}");
    if u.is_some() {
        run.note("13", format!("an out-of-range head came back as {u:?}"));
    }
    responsive(&mut run, &mut fe, "13 avail head past the table", 130);

    // ---- both back-ends alive, no panic ----
    for (name, b) in [("rw", &mut rw), ("ro", &mut ro)] {
        let alive = b.running() && alive(b.pid());
        let log = b.log_text();
        run.check(&format!("end {name}"), alive, "back-end still running");
        run.check(
            &format!("end {name}"),
            !log.contains("panicked"),
            "no panic in its log",
        );
        if !log.trim().is_empty() {
            eprintln!("---- {name} back-end log ----\n{log}");
        }
    }
    drop(fe);
    drop(rofe);
    for (name, b) in [("rw", &mut rw), ("ro", &mut ro)] {
        let clean = b.stop();
        run.check(
            &format!("end {name}"),
            clean,
            "stopped by SIGTERM within 10 s",
        );
    }

    eprintln!(
        "{} checks passed, {} failed, {} notes, in {:?}",
        run.passed.len(),
        run.failures.len(),
        run.notes.len(),
        started.elapsed()
    );
    for n in &run.notes {
        eprintln!("note: {n}");
    }
    assert!(
        run.failures.is_empty(),
        "{} failures:\n{}",
        run.failures.len(),
        run.failures.join("\n")
    );
}
