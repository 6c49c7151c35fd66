//! The server driven by real NBD clients, as subprocesses with hard
//! timeouts: libnbd's `nbdinfo` and `nbdcopy`, `qemu-img` and `qemu-io`,
//! fio's `nbd` engine, and the Linux kernel's nbd driver (in a small VM,
//! through the vm-initiator harness), with hostile raw clients in between.
//!
//! Every server runs in-process on 127.0.0.1:0 over in-memory volumes. A
//! missing tool fails its test with the Debian package to install
//! (`scripts/deps.sh test` installs them all); nothing is skipped. The
//! tests assert on what the tools report and on the data, never on time.

mod common;

use std::fs::{self, File};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::thread;

use common::scenarios::*;
use common::tools::*;
use common::*;
use pontoon_buf::AlignedBuf;
use pontoon_nbd::proto::*;
use pontoon_nbd::{ServerConfig, ServerHandle, start};
use pontoon_volume::{
    BlockVolume, Extent, MemCatalog, MemVolume, VolumeCatalog, VolumeError, VolumeInfo,
};

/// The kernel test boots a VM under TCG: it runs alone, so that the
/// other tests' load does not slow the guest into the harness's races.
static VM_EXCLUSIVE: RwLock<()> = RwLock::new(());

/// Held by every test but the kernel one.
fn shared() -> RwLockReadGuard<'static, ()> {
    VM_EXCLUSIVE.read().unwrap_or_else(PoisonError::into_inner)
}

const GIB: u64 = 1 << 30;
/// The big writable volume.
const VOL: u64 = GIB;
/// A thin volume holding only [`SPARSE_DATA`].
const SPARSE: u64 = GIB;
const SMALL: u64 = 64 * MIB;
/// What "sparse" holds: (offset, length, pattern seed).
const SPARSE_DATA: [(u64, u64, u64); 3] = [
    (0, MIB, 11),
    (300 * MIB, 64 * 1024, 12),
    (SPARSE - 4096, 4096, 13),
];

fn config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    }
}

fn sparse_volume() -> MemVolume {
    let v = MemVolume::new(SPARSE);
    for (off, len, seed) in SPARSE_DATA {
        prefill(&v, off, &pattern(seed, len as usize));
    }
    v
}

/// A server with "vol" (1 GiB, empty), "sparse" (1 GiB, a little data)
/// and "small" (64 MiB, empty).
fn standard_server(config: ServerConfig) -> ServerHandle {
    start(
        config,
        Arc::new(|| {
            let c = MemCatalog::default();
            c.insert("vol", MemVolume::new(VOL));
            c.insert("sparse", sparse_volume());
            c.insert("small", MemVolume::new(SMALL));
            c
        }),
    )
    .expect("start NBD server")
}

#[test]
fn nbdinfo_and_qemu_img_report_exports_sizes_and_block_sizes() {
    let _shared = shared();
    let cfg = ServerConfig {
        default_export: Some("small".into()),
        ..config()
    };
    let (min, pref, max) = (cfg.min_block(), cfg.preferred_block(), cfg.max_payload);
    let server = standard_server(cfg);
    let port = server.local_addr().port();
    let base = format!("nbd://127.0.0.1:{port}");

    let list = run_ok(nbdinfo().args(["--list", &base])).stdout;
    assert_eq!(
        listed_exports(&list),
        vec![
            ("small".to_string(), SMALL),
            ("sparse".to_string(), SPARSE),
            ("vol".to_string(), VOL),
        ],
        "nbdinfo --list:\n{list}"
    );
    assert!(list.contains("description: Pontoon volume, 1073741824 bytes"));

    let json = run_ok(nbdinfo().args(["--json", &uri(&server, "vol")])).stdout;
    assert_eq!(json_u64(&json, "export-size"), VOL, "{json}");
    assert_eq!(json_u64(&json, "block_size_minimum"), u64::from(min));
    assert_eq!(json_u64(&json, "block_size_preferred"), u64::from(pref));
    assert_eq!(json_u64(&json, "block_size_maximum"), u64::from(max));
    assert!(json_bool(&json, "structured"));
    for yes in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_df",
        "can_multi_conn",
    ] {
        assert!(json_bool(&json, yes), "{yes} should be true:\n{json}");
    }
    for no in [
        "is_read_only",
        "is_rotational",
        "can_cache",
        "can_fast_zero",
    ] {
        assert!(!json_bool(&json, no), "{no} should be false:\n{json}");
    }
    assert!(json.contains("\"base:allocation\""), "{json}");

    for (export, size) in [("vol", VOL), ("small", SMALL)] {
        let info = run_ok(qemu_img().args(["info", "--output=json", &uri(&server, export)])).stdout;
        assert_eq!(json_u64(&info, "virtual-size"), size, "{info}");
    }
    // No export name: the configured default export.
    let info = run_ok(qemu_img().args(["info", "--output=json", &base])).stdout;
    assert_eq!(json_u64(&info, "virtual-size"), SMALL, "{info}");
    // An unknown export: qemu shows the server's message.
    let r = run(qemu_img().args(["info", &uri(&server, "nosuch")]), LIMIT);
    assert!(!r.success(), "{}", r.report());
    assert!(
        r.stderr.contains("no volume named 'nosuch'"),
        "{}",
        r.report()
    );
}

#[test]
fn qemu_io_unaligned_aligned_zero_and_discard_read_back() {
    let _shared = shared();
    let server = standard_server(config());
    let u = uri(&server, "vol");
    qemu_io_scenario(&u);
    // Deallocated ranges are reported as holes, written ones as data.
    let map = nbd_map(&u);
    assert!(covered(&map, 16 * MIB, MIB, false), "{map:?}");
    assert!(covered(&map, 18 * MIB, MIB, false), "{map:?}");
    assert!(covered(&map, 0, 4096, true), "{map:?}");
    assert!(covered(&map, 4096, 24576, false), "{map:?}");
    assert!(covered(&map, 28672, 16384, true), "{map:?}");
    assert!(covered(&map, 8 * MIB - 65536, 131072, true), "{map:?}");
    assert!(covered(&map, 24 * MIB, VOL - 24 * MIB, false), "{map:?}");
}

#[test]
fn nbdcopy_round_trips_256_mib_through_a_volume() {
    let _shared = shared();
    let server = standard_server(config());
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.img"), dir.path().join("out.img"));
    random_file(&input, 256 * MIB, 1);
    let u = uri(&server, "vol");
    run_ok(nbdcopy().arg(&input).arg(&u));
    run_ok(nbdcopy().arg(&u).arg(&output));
    assert_eq!(fs::metadata(&output).unwrap().len(), VOL);
    assert_zero_from(&output, 256 * MIB);
    File::options()
        .write(true)
        .open(&output)
        .unwrap()
        .set_len(256 * MIB)
        .unwrap();
    assert_eq!(sha256(&input), sha256(&output));
    assert_eq!(
        nbd_map(&u),
        vec![
            extent(0, 256 * MIB, true),
            extent(256 * MIB, VOL - 256 * MIB, false)
        ]
    );
}

#[test]
fn sparse_volume_maps_holes_and_nbdcopy_skips_them() {
    let _shared = shared();
    // Whole reads (no hole chunks), so the volume's read counter shows
    // exactly the bytes clients asked for.
    let read_bytes = Arc::new(AtomicU64::new(0));
    let counter = read_bytes.clone();
    let server = start(
        ServerConfig {
            sparse_reads: false,
            ..config()
        },
        Arc::new(move || {
            let mut volume = CountingVolume::new(sparse_volume());
            volume.read_bytes = counter.clone();
            CountingCatalog {
                name: "sparse".into(),
                volume,
            }
        }),
    )
    .unwrap();
    let u = uri(&server, "sparse");
    let mut expected = Vec::new();
    let mut pos = 0;
    for (off, len, _) in SPARSE_DATA {
        if off > pos {
            expected.push(extent(pos, off - pos, false));
        }
        expected.push(extent(off, len, true));
        pos = off + len;
    }
    assert_eq!(pos, SPARSE);
    assert_eq!(nbd_map(&u), expected);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sparse.img");
    let before = read_bytes.load(Ordering::Relaxed);
    run_ok(nbdcopy().arg(&u).arg(&out));
    let sparse_read = read_bytes.load(Ordering::Relaxed) - before;
    // The copy is right...
    let mut f = File::open(&out).unwrap();
    let mut got = Vec::new();
    for (off, len, seed) in SPARSE_DATA {
        got.resize(len as usize, 0);
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(off)).unwrap();
        f.read_exact(&mut got).unwrap();
        assert!(got == pattern(seed, len as usize), "data at {off} differs");
    }
    assert_eq!(fs::metadata(&out).unwrap().len(), SPARSE);
    // ...and read only the data: nbdcopy followed the block status.
    let data: u64 = SPARSE_DATA.iter().map(|d| d.1).sum();
    assert!(
        (data..4 * data).contains(&sparse_read),
        "copying the sparse volume read {sparse_read} bytes for {data} bytes of data"
    );
    // Ignoring extents reads every byte of the volume.
    let before = read_bytes.load(Ordering::Relaxed);
    run_ok(nbdcopy().args(["--no-extents", &u, "null:"]));
    let full_read = read_bytes.load(Ordering::Relaxed) - before;
    assert!(
        full_read >= SPARSE,
        "a full copy read only {full_read} bytes"
    );
    assert_zero_from_except(&out);
}

/// The sparse copy holds zeros outside [`SPARSE_DATA`].
fn assert_zero_from_except(path: &Path) {
    let mut f = File::open(path).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut at = 0u64;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            let p = at + i as u64;
            if b != 0 && !SPARSE_DATA.iter().any(|&(o, l, _)| (o..o + l).contains(&p)) {
                panic!("non-zero byte at {p} outside the data");
            }
        }
        at += n as u64;
    }
}

#[test]
fn fio_random_writes_verify_now_and_in_a_later_verify_only_pass() {
    let _shared = shared();
    let server = standard_server(config());
    let dir = tempfile::tempdir().unwrap();
    let u = uri(&server, "vol");
    let job = |extra: &[&str]| {
        let mut c = fio();
        // fio may save verify state files in its working directory.
        c.current_dir(dir.path()).args([
            "--name=t",
            "--ioengine=nbd",
            &format!("--uri={u}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=32",
            "--size=64m",
            "--verify=crc32c",
            "--output-format=json",
        ]);
        c.args(extra);
        run(&mut c, LIMIT)
    };
    // Random writes, then fio reads back and checks every block.
    let r = job(&["--do_verify=1"]).ok();
    assert!(
        fio_errors(&r.stdout).iter().all(|&e| e == 0),
        "{}",
        r.report()
    );
    // read, write, trim
    assert_eq!(
        json_u64s(&r.stdout, "io_bytes")[..2],
        [64 * MIB, 64 * MIB],
        "{}",
        r.report()
    );
    // A separate process, new connection: verify only, same job.
    let r = job(&["--verify_only"]).ok();
    assert!(
        fio_errors(&r.stdout).iter().all(|&e| e == 0),
        "{}",
        r.report()
    );
    assert_eq!(
        json_u64s(&r.stdout, "io_bytes")[0],
        64 * MIB,
        "{}",
        r.report()
    );
    // The verify-only pass really checks: one overwritten block fails it.
    qemu_io_run(&u, &["write -P 0x01 41943040 4096".to_string()]);
    let r = job(&["--verify_only"]);
    assert!(
        !r.success(),
        "verify-only missed a corrupted block:\n{}",
        r.report()
    );
    assert!(
        fio_errors(&r.stdout).iter().any(|&e| e != 0),
        "{}",
        r.report()
    );
    assert!(r.stderr.contains("verify"), "{}", r.report());
}

#[test]
fn linux_kernel_nbd_driver_writes_trims_and_verifies() {
    let _alone = VM_EXCLUSIVE.write().unwrap_or_else(PoisonError::into_inner);
    let server = standard_server(config());
    // TRIM=1: blkdiscard of the first MiB.
    let r = kernel_nbd_test(server.local_addr().port(), "vol");
    assert!(r.stdout.contains("discard accepted"), "{}", r.report());
    // What the kernel left, seen by another client: 16 MiB written at 0
    // with the first MiB then discarded, and the last MiB written.
    assert_eq!(
        nbd_map(&uri(&server, "vol")),
        vec![
            extent(0, MIB, false),
            extent(MIB, 15 * MIB, true),
            extent(16 * MIB, VOL - 17 * MIB, false),
            extent(VOL - MIB, MIB, true),
        ]
    );
}

#[test]
fn several_workers_serve_qemu_and_multi_connection_nbdcopy() {
    let _shared = shared();
    let shared = MemCatalog::default();
    shared.insert("vol", MemVolume::new(256 * MIB));
    let cfg = ServerConfig {
        workers: 2,
        ..config()
    };
    assert_eq!(cfg.min_block(), 4096);
    let server = start(cfg, Arc::new(move || shared.clone())).unwrap();
    let u = uri(&server, "vol");
    let json = run_ok(nbdinfo().args(["--json", &u])).stdout;
    assert_eq!(json_u64(&json, "block_size_minimum"), 4096, "{json}");
    assert_eq!(json_u64(&json, "block_size_preferred"), 4096, "{json}");
    // qemu honours the 4 KiB minimum (it read-modify-writes unaligned
    // requests itself); the data is right whichever worker serves it.
    qemu_io_scenario(&u);
    // nbdcopy opens several connections (multi-conn): they land on
    // different workers.
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.img"), dir.path().join("out.img"));
    random_file(&input, 32 * MIB, 2);
    run_ok(nbdcopy().args(["--connections=4"]).arg(&input).arg(&u));
    run_ok(nbdcopy().args(["--connections=4"]).arg(&u).arg(&output));
    File::options()
        .write(true)
        .open(&output)
        .unwrap()
        .set_len(32 * MIB)
        .unwrap();
    assert_eq!(sha256(&input), sha256(&output));
}

#[test]
fn concurrent_real_clients_and_a_stalled_client_share_one_worker() {
    let _shared = shared();
    let server = standard_server(config());
    let addr = server.local_addr();
    // A client that pipelines big reads and never reads the replies: the
    // server must stop reading from it without blocking anyone else.
    let mut stalled = Raw::connect(addr);
    stalled.go("small", false);
    const BIG: u32 = 32 << 20;
    const N: u64 = 16;
    for h in 0..N {
        stalled.request(Command::Read, 0, h, 0, BIG);
    }
    // Four qemu-io processes write interleaved 100-byte slices into the
    // same blocks (read-modify-write under the server's range lock).
    let u = uri(&server, "small");
    let slice = |i: u64| 8192 + 7 + i * 100;
    let writers: Vec<_> = (0..4u64)
        .map(|p| {
            let u = u.clone();
            thread::spawn(move || {
                let cmds: Vec<String> = (0..64u64)
                    .filter(|i| i % 4 == p)
                    .map(|i| format!("aio_write -P {} {} 100", i + 1, slice(i)))
                    .chain(["aio_flush".to_string()])
                    .collect();
                qemu_io_run(&u, &cmds);
            })
        })
        .collect();
    for w in writers {
        w.join().expect("qemu-io writer");
    }
    let mut check: Vec<String> = (0..64u64)
        .map(|i| format!("read -q -P {} {} 100", i + 1, slice(i)))
        .collect();
    check.push(format!("read -q -P 0 0 {}", slice(0)));
    check.push(format!("read -q -P 0 {} 10000", slice(64)));
    qemu_io_run(&u, &check);
    run_ok(nbdinfo().args(["--size", &u]));
    // The stalled client gets every reply once it reads.
    let mut seen = Vec::new();
    for _ in 0..N {
        let r = stalled.simple_reply();
        assert_eq!(r.error, 0);
        assert_eq!(stalled.read_n(BIG as usize).len(), BIG as usize);
        seen.push(r.handle);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..N).collect::<Vec<_>>());
    stalled.disconnect();
}

/// qemu-io writes and reads back a unique pattern, and nbdinfo lists the
/// exports: the server still serves real clients.
fn real_clients_work(server: &ServerHandle, round: u64) {
    let off = 1000 + round * 10_000;
    let pat = 0x10 + round;
    qemu_io_run(
        &uri(server, "small"),
        &[
            format!("write -P {pat:#x} {off} 5000"),
            format!("read -P {pat:#x} {off} 5000"),
        ],
    );
    let list = run_ok(nbdinfo().args([
        "--list",
        &format!("nbd://127.0.0.1:{}", server.local_addr().port()),
    ]))
    .stdout;
    assert_eq!(listed_exports(&list).len(), 3, "{list}");
}

fn simple_reply_bytes(handle: u64, errno: Errno) -> Vec<u8> {
    let mut b = Vec::new();
    encode_simple_reply(&mut b, handle, errno);
    b
}

#[test]
fn hostile_raw_clients_leave_real_clients_working() {
    let _shared = shared();
    let server = standard_server(config());
    let addr = server.local_addr();
    let mut round = 0;
    let mut next = || {
        round += 1;
        real_clients_work(&server, round);
    };
    next();

    // Wrong magic in the handshake: junk instead of client flags, and an
    // option without IHAVEOPT.
    let mut c = Raw::connect_bare(addr);
    c.send(b"NOTNBD!!");
    assert!(c.closed_by_server());
    let mut c = Raw::connect(addr);
    let mut h = OptionHeader {
        option: OPT_GO,
        length: 0,
    }
    .encode();
    h[..8].copy_from_slice(b"IHAVEOPS");
    c.send(&h);
    assert!(c.closed_by_server());
    next();

    // An unknown export through NBD_OPT_GO: NBD_REP_ERR_UNKNOWN, and the
    // same connection can still pick a real one.
    let mut c = Raw::connect(addr);
    let r = c.option(
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
    assert_eq!(c.go("small", false).0, SMALL);

    // Past the end: EINVAL for reads (and block status), ENOSPC for writes.
    c.request(Command::Read, 0, 1, SMALL - 512, 1024);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(1, Errno::EINVAL)
    );
    c.request(Command::Write, 0, 2, SMALL, 1);
    c.send(&[1]);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(2, Errno::ENOSPC)
    );
    // Longer than the maximum payload: EINVAL for a read...
    c.request(Command::Read, 0, 3, 0, (32 << 20) + 1);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(3, Errno::EINVAL)
    );
    next();
    // ...and EINVAL then a disconnect for a write (its payload is not read).
    c.request(Command::Write, 0, 4, 0, 64 << 20);
    c.send(&[0u8; 4096]);
    assert_eq!(
        c.read_n(SIMPLE_REPLY_LEN),
        simple_reply_bytes(4, Errno::EINVAL)
    );
    assert!(c.closed_by_server());
    next();

    // Garbage after the handshake: a clean disconnect.
    let mut c = Raw::connect(addr);
    c.go("small", true);
    c.send(&pattern(5, 4096));
    assert!(c.closed_by_server());
    // A client that vanishes in the middle of a write payload.
    let mut c = Raw::connect(addr);
    c.go("small", false);
    c.request(Command::Write, 0, 5, 0, 1 << 20);
    c.send(&[9u8; 1000]);
    drop(c);
    // A client that never finishes the handshake stays connected while
    // the others work.
    let mut idle = Raw::connect_bare(addr);
    next();
    idle.send(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
    assert_eq!(idle.go("small", false).0, SMALL);
    // Nothing of the abandoned write landed.
    assert_eq!(idle.read(6, 0, 1000), vec![0u8; 1000]);
    idle.disconnect();
}

/// Reads touching `[EIO_AT, EIO_AT + 1 MiB)` fail as lost data.
const EIO_AT: u64 = 8 * MIB;
/// Writes (and zeroes, discards) touching this MiB fail as a full pool.
const ENOSPC_AT: u64 = 16 * MIB;
/// Writes touching this MiB fail as read-only.
const EPERM_AT: u64 = 24 * MIB;

fn hits(off: u64, len: u64, at: u64) -> bool {
    off < at + MIB && at < off + len
}

/// A volume that fails in fixed ranges, the way a cluster volume reports
/// unreadable data, a full pool or a read-only snapshot.
#[derive(Clone)]
struct FaultyVolume(MemVolume);

impl FaultyVolume {
    fn check_write(&self, off: u64, len: u64) -> Result<(), VolumeError> {
        if hits(off, len, ENOSPC_AT) {
            return Err(VolumeError::NoSpace("pool is full".into()));
        }
        if hits(off, len, EPERM_AT) {
            return Err(VolumeError::ReadOnly);
        }
        Ok(())
    }
}

impl BlockVolume for FaultyVolume {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_only(&self) -> bool {
        self.0.read_only()
    }
    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        if hits(offset, len, EIO_AT) {
            return Err(VolumeError::DataLoss("no intact replica".into()));
        }
        self.0.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: AlignedBuf, fua: bool) -> Result<(), VolumeError> {
        self.check_write(offset, data.len() as u64)?;
        self.0.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), VolumeError> {
        self.0.flush().await
    }
    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.check_write(offset, len)?;
        self.0.discard(offset, len).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<(), VolumeError> {
        self.check_write(offset, len)?;
        self.0.write_zeroes(offset, len, unmap).await
    }
    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        self.0.allocation(offset, len).await
    }
}

struct FaultyCatalog(FaultyVolume);

impl VolumeCatalog for FaultyCatalog {
    type Volume = FaultyVolume;
    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        Ok(vec![VolumeInfo {
            name: "faulty".into(),
            size: self.0.size(),
        }])
    }
    async fn open(&self, name: &str) -> Result<Option<FaultyVolume>, VolumeError> {
        Ok((name == "faulty").then(|| self.0.clone()))
    }
}

#[test]
fn volume_errors_reach_real_clients_as_errnos() {
    let _shared = shared();
    let server = start(
        config(),
        Arc::new(|| {
            // Data where reads fail (a hole would be answered from the
            // allocation map without reading).
            let v = MemVolume::new(SMALL);
            prefill(&v, EIO_AT, &pattern(3, MIB as usize));
            FaultyCatalog(FaultyVolume(v))
        }),
    )
    .unwrap();
    let u = uri(&server, "faulty");
    let mut c = qemu_io();
    c.args(["-f", "raw", &u]);
    for cmd in [
        format!("read {EIO_AT} 4096"),
        // An unaligned write must read the edge block first: that fails.
        format!("write -P 0x1 {} 100", EIO_AT + 10),
        format!("write -P 0x1 {ENOSPC_AT} 4096"),
        format!("write -z {} 8192", ENOSPC_AT + 4096),
        format!("write -P 0x1 {EPERM_AT} 4096"),
        // The connection still works afterwards.
        "write -P 0x2 1000 5000".to_string(),
        "read -P 0x2 1000 5000".to_string(),
    ] {
        c.args(["-c", &cmd]);
    }
    let r = run(&mut c, LIMIT);
    let out = format!("{}{}", r.stdout, r.stderr);
    let failures: Vec<&str> = out.lines().filter(|l| l.contains("failed")).collect();
    assert_eq!(
        failures,
        [
            "read failed: Input/output error",
            "write failed: Input/output error",
            "write failed: No space left on device",
            "write failed: No space left on device",
            "write failed: Operation not permitted",
        ],
        "{}",
        r.report()
    );
    assert!(
        out.contains("read 5000/5000 bytes at offset 1000"),
        "{}",
        r.report()
    );
    // nbdcopy stops with the read error instead of copying bad data.
    let r = run(nbdcopy().args([&u, "null:"]), LIMIT);
    assert!(
        !r.success(),
        "nbdcopy copied an unreadable volume:\n{}",
        r.report()
    );
    assert!(r.stderr.contains("Input/output error"), "{}", r.report());
}

#[test]
fn unaligned_zeroing_with_unmap_leaves_no_allocated_zero_blocks() {
    let _shared = shared();
    let server = standard_server(config());
    let u = uri(&server, "small");
    qemu_io_run(
        &u,
        &[
            // qemu splits a long write-zeroes into 32 MiB requests: from an
            // odd offset, every one starts and ends inside a block.
            "write -z -u 5 41943040".into(),
            // 20 bytes of data straddling 48 MiB, then zeroed again.
            format!("write -P 0xaa {} 20", 48 * MIB - 10),
            format!("write -z -u {} 20", 48 * MIB - 10),
            format!("read -P 0 0 {SMALL}"),
        ],
    );
    // The edge blocks hold nothing but zeros: they are holes, not
    // allocated blocks of zeros.
    assert_eq!(nbd_map(&u), vec![extent(0, SMALL, false)]);
    // Without unmap (NBD_CMD_FLAG_NO_HOLE) qemu asks for allocated zeros;
    // the bytes read as zeros either way.
    qemu_io_run(
        &u,
        &[
            format!("write -P 0xaa {} 20", 48 * MIB - 10),
            format!("write -z {} 20", 48 * MIB - 10),
            format!("read -P 0 {} 8192", 48 * MIB - 4096),
        ],
    );
}
