//! Deep scrub finds and mends rotten copies, and names what it cannot mend,
//! on a real three-OSD cluster (size-3 pool, so every OSD holds every
//! object):
//! - one bit flipped in a data block of object 0 on a replica and one in
//!   object 1 on its primary (in the OSDs' backing files, while they run):
//!   a deep scrub of the pool finds both (their PGs report the
//!   inconsistency and the repair, nothing else does), the three OSD files
//!   then hold byte-identical copies of both objects (only the rotten block
//!   left behind in freed space differs), a second deep scrub finds every
//!   copy consistent, and the volume reads back exactly as written;
//! - the same block of object 2 rotten on all three OSDs: a deep scrub
//!   reports `vol<ID>.2` unrecoverable by name (`pg ls`, `status`), NBD
//!   reads of it fail with EIO (our own NBD client sees error 5, qemu-io
//!   says "Input/output error", nbdcopy of the whole volume fails), and
//!   the rest of the volume reads back exactly as written;
//! - no OSD process restarted or died along the way.
//!
//! Every block of the test data starts with a unique marker, so its copy in
//! each OSD's backing file is found by scanning the file.
//!
//! Needs etcd-server, libnbd-bin (nbdcopy) and qemu-utils (qemu-io).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use pontoon_testtools::{need, run};
use pontoon_types::ObjectId;
use serde_json::Value;

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;
const BLOCK_U64: u64 = BLOCK as u64;
const OBJECT: u64 = 4 * MIB;
const VOLUME: u64 = 48 * MIB;
const PGS: u64 = 8;
const OSDS: u32 = 3;
/// Starts every block of the test data, followed by the block's number.
const MARK: &[u8; 12] = b"PONTOONSCRUB";
/// Longest a deep scrub of the pool may take to show in `pg ls`.
const SCRUB_LIMIT: Duration = Duration::from_secs(60);
/// Longest one run of a client tool may take.
const TOOL_LIMIT: Duration = Duration::from_secs(60);
/// Where in a block the flipped bit lies (away from the marker).
const FLIP_AT: u64 = 2048 + 7;

/// Block `b` of the test data: the marker, `b`, then bytes unlike any
/// other block's.
fn block(b: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK);
    out.extend_from_slice(MARK);
    out.extend_from_slice(&b.to_le_bytes());
    let mut i = 0u64;
    while out.len() < BLOCK {
        let word = pontoon_types::mix64((u64::from(b) << 20) ^ i ^ 0x5c7b);
        let room = (BLOCK - out.len()).min(8);
        out.extend_from_slice(&word.to_le_bytes()[..room]);
        i += 1;
    }
    out
}

fn source() -> Vec<u8> {
    (0..(VOLUME / BLOCK_U64) as u32).flat_map(block).collect()
}

fn img(dir: &Path, osd: u32) -> std::path::PathBuf {
    dir.join(format!("osd.{osd}.img"))
}

/// Where each marked block lies in a file: block number -> byte offsets.
fn scan(path: &Path) -> BTreeMap<u32, Vec<u64>> {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("open {path:?}: {e}"));
    let len = f.metadata().expect("stat").len();
    let mut buf = vec![0u8; (8 * MIB) as usize];
    let mut found: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        f.read_exact(&mut buf[..n]).expect("read the OSD file");
        for (i, blk) in buf[..n].chunks_exact(BLOCK).enumerate() {
            if blk.starts_with(MARK) {
                let b = u32::from_le_bytes(blk[12..16].try_into().expect("4 bytes"));
                found.entry(b).or_default().push(off + i as u64 * BLOCK_U64);
            }
        }
        off += n as u64;
    }
    found
}

fn read_block(path: &Path, off: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    File::open(path)
        .and_then(|f| f.read_exact_at(&mut b, off))
        .unwrap_or_else(|e| panic!("read {path:?} at {off}: {e}"));
    b
}

/// Flips one bit of the block at `off` in `path`, durably; returns the
/// block as it is now.
fn flip(path: &Path, off: u64) -> Vec<u8> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {path:?}: {e}"));
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, off + FLIP_AT)
        .expect("read a byte");
    byte[0] ^= 0x20;
    f.write_all_at(&byte, off + FLIP_AT).expect("flip a bit");
    f.sync_data().expect("sync the OSD file");
    read_block(path, off)
}

/// A minimal NBD client (fixed newstyle, simple replies), so a read's
/// exact error number is seen.
struct Nbd {
    s: TcpStream,
    size: u64,
    handle: u64,
}

const NBD_EIO: u32 = 5;

impl Nbd {
    fn connect(addr: &str, export: &str) -> Nbd {
        let mut s = TcpStream::connect(addr).expect("connect to the NBD gateway");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).expect("NBD greeting");
        assert_eq!(&hello[..16], b"NBDMAGICIHAVEOPT", "NBD greeting");
        let flags = u16::from_be_bytes([hello[16], hello[17]]);
        assert!(flags & 1 != 0, "server is not fixed newstyle");
        let no_zeroes = flags & 2 != 0;
        let mut msg = Vec::new();
        msg.extend_from_slice(&(1u32 | if no_zeroes { 2 } else { 0 }).to_be_bytes());
        msg.extend_from_slice(b"IHAVEOPT");
        msg.extend_from_slice(&1u32.to_be_bytes()); // NBD_OPT_EXPORT_NAME
        msg.extend_from_slice(&(export.len() as u32).to_be_bytes());
        msg.extend_from_slice(export.as_bytes());
        s.write_all(&msg).expect("send NBD options");
        let mut info = [0u8; 10];
        s.read_exact(&mut info).expect("export info");
        if !no_zeroes {
            s.read_exact(&mut [0u8; 124]).expect("zeroes");
        }
        let size = u64::from_be_bytes(info[..8].try_into().expect("8 bytes"));
        Nbd { s, size, handle: 0 }
    }

    /// Reads `len` bytes at `off`: the data, or the NBD error number.
    fn read(&mut self, off: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.handle += 1;
        let mut req = Vec::with_capacity(28);
        req.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        req.extend_from_slice(&0u16.to_be_bytes());
        req.extend_from_slice(&0u16.to_be_bytes()); // NBD_CMD_READ
        req.extend_from_slice(&self.handle.to_be_bytes());
        req.extend_from_slice(&off.to_be_bytes());
        req.extend_from_slice(&len.to_be_bytes());
        self.s.write_all(&req).expect("send NBD read");
        let mut reply = [0u8; 16];
        self.s.read_exact(&mut reply).expect("NBD reply");
        assert_eq!(reply[..4], 0x6744_6698u32.to_be_bytes(), "simple reply");
        assert_eq!(reply[8..], self.handle.to_be_bytes(), "reply handle");
        let error = u32::from_be_bytes(reply[4..8].try_into().expect("4 bytes"));
        if error != 0 {
            return Err(error);
        }
        let mut data = vec![0u8; len as usize];
        self.s.read_exact(&mut data).expect("NBD read data");
        Ok(data)
    }

    /// Checks `range` of the volume against `src`, 1 MiB at a time.
    fn expect_range(&mut self, src: &[u8], range: std::ops::Range<u64>) {
        let mut off = range.start;
        while off < range.end {
            let len = (range.end - off).min(MIB);
            let got = self
                .read(off, len as u32)
                .unwrap_or_else(|e| panic!("NBD read of {len} bytes at {off} failed: error {e}"));
            let want = &src[off as usize..(off + len) as usize];
            if got != want {
                let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                panic!(
                    "the volume reads back wrong at byte {} (block {})",
                    off + first as u64,
                    (off + first as u64) / BLOCK_U64
                );
            }
            off += len;
        }
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        // NBD_CMD_DISC.
        let mut req = Vec::with_capacity(28);
        req.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        req.extend_from_slice(&0u16.to_be_bytes());
        req.extend_from_slice(&2u16.to_be_bytes());
        req.extend_from_slice(&[0u8; 20]);
        let _ = self.s.write_all(&req);
    }
}

fn pg_list(dir: &Path) -> Vec<Value> {
    json(dir, &["pg", "ls", "--json"])
        .as_array()
        .cloned()
        .expect("pg ls prints a list")
}

fn pg<'a>(pgs: &'a [Value], id: &str) -> &'a Value {
    pgs.iter()
        .find(|p| p["pgid"] == id)
        .unwrap_or_else(|| panic!("pg {id} not in pg ls: {pgs:#?}"))
}

/// Asks for a deep scrub of pool `p` and waits until every PG's primary
/// reports one finished since; returns `pg ls`.
fn deep_scrub(dir: &Path, why: &str) -> Vec<Value> {
    let last = pg_list(dir)
        .iter()
        .filter_map(|p| p["scrub"]["last_deep_scrub_unix"].as_u64())
        .max()
        .unwrap_or(0);
    // So that a stamp at or after the request is a new scrub's.
    while unix_now() <= last {
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = unix_now();
    let t0 = Instant::now();
    ok(dir, &["pool", "deep-scrub", "p"]);
    let v = wait_json(
        dir,
        &["pg", "ls", "--json"],
        &format!("every PG deep-scrubbed at or after {asked} ({why})"),
        SCRUB_LIMIT,
        |v| {
            v.as_array().is_some_and(|a| {
                a.len() == PGS as usize
                    && a.iter().all(|p| {
                        p["scrub"]["last_deep_scrub_unix"]
                            .as_u64()
                            .is_some_and(|t| t >= asked)
                            && p["scrub"]["progress"].is_null()
                    })
            })
        },
    );
    eprintln!("deep scrub ({why}) done in {:?}", t0.elapsed());
    v.as_array().cloned().unwrap_or_default()
}

/// OSD log lines containing `what`.
fn log_lines(dir: &Path, what: &str) -> Vec<String> {
    (0..OSDS)
        .flat_map(|i| {
            std::fs::read_to_string(dir.join(format!("log/osd.{i}.log")))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(what))
                .map(|l| format!("osd.{i}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn deep_scrub_repairs_rotten_copies_and_names_lost_objects() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-scrub-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let _up = Up::start_sized(&dir, OSDS as usize, "512M", &["--nbd", &nbd]);
    ok(
        &dir,
        &[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            &PGS.to_string(),
        ],
    );
    ok(&dir, &["volume", "create", "v", "--size", "48M"]);
    wait_status(&dir, "all PGs clean", |s| {
        s["osds"]["up"] == OSDS && s["pgs"]["states"]["active+clean"].as_u64() == Some(PGS)
    });
    let pids: Vec<u32> = (0..OSDS).map(|i| osd_pid(&dir, i)).collect();
    let files: Vec<_> = (0..OSDS).map(|i| img(&dir, i)).collect();
    for f in &files {
        assert!(f.exists(), "no OSD file {f:?}");
    }

    let vols = json(&dir, &["volume", "ls", "--json"]);
    let vol_id = vols
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == "v"))
        .and_then(|v| v["id"].as_u64())
        .unwrap_or_else(|| panic!("volume v not in volume ls: {vols:#}"));
    let pgs = pg_list(&dir);
    let pool_id = pgs[0]["pgid"]
        .as_str()
        .and_then(|s| s.split_once('.'))
        .map(|(p, _)| p.to_string())
        .expect("pgid is pool.index");
    let pg_of = |index: u64| {
        let h = ObjectId::new(vol_id, index).placement_hash();
        format!("{pool_id}.{:x}", h % PGS)
    };

    // The whole volume, in large writes (straight to the data area).
    let src = source();
    let src_path = dir.join("v.src");
    std::fs::write(&src_path, &src).expect("write the source file");
    let uri = format!("nbd://{nbd}/v");
    run(
        need("nbdcopy", "libnbd-bin").args([src_path.to_str().expect("utf-8 path"), &uri]),
        TOOL_LIMIT,
    )
    .ok();
    eprintln!("written after {:?}", started.elapsed());

    // Our object -> PG mapping agrees with what the primaries count.
    let objects = VOLUME / OBJECT;
    let mut per_pg: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..objects {
        *per_pg.entry(pg_of(i)).or_default() += 1;
    }
    wait_json(
        &dir,
        &["pg", "ls", "--json"],
        "each PG's object count as placement_hash % pgs predicts",
        WAIT,
        |v| {
            v.as_array().is_some_and(|a| {
                a.iter().all(|p| {
                    let id = p["pgid"].as_str().unwrap_or_default();
                    p["objects"].as_u64() == Some(per_pg.get(id).copied().unwrap_or(0))
                })
            })
        },
    );

    // Every block is in every OSD's file exactly once.
    let t0 = Instant::now();
    let maps: Vec<BTreeMap<u32, Vec<u64>>> = files.iter().map(|f| scan(f)).collect();
    eprintln!("scanned the OSD files in {:?}", t0.elapsed());
    let blocks = (VOLUME / BLOCK_U64) as u32;
    for (i, m) in maps.iter().enumerate() {
        let odd: Vec<(u32, usize)> = (0..blocks)
            .map(|b| (b, m.get(&b).map_or(0, Vec::len)))
            .filter(|(_, n)| *n != 1)
            .collect();
        assert!(
            odd.is_empty(),
            "osd.{i}'s file does not hold every block exactly once \
             ({} blocks differ; first (block, copies): {:?})",
            odd.len(),
            &odd[..odd.len().min(10)]
        );
        for b in [100, 1024 + 200, 2048 + 300] {
            assert_eq!(
                read_block(&files[i], m[&b][0]),
                block(b),
                "osd.{i}'s copy of block {b}"
            );
        }
    }

    // Object 0 rots on a replica, object 1 on its primary.
    let acting = |pgs: &[Value], id: &str| -> Vec<u32> {
        pg(pgs, id)["acting"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|o| o.as_u64())
                    .map(|o| o as u32)
                    .collect()
            })
            .unwrap_or_default()
    };
    let pgs = pg_list(&dir);
    let (pg_a, pg_b, pg_c) = (pg_of(0), pg_of(1), pg_of(2));
    let (act_a, act_b) = (acting(&pgs, &pg_a), acting(&pgs, &pg_b));
    assert_eq!(act_a.len(), 3, "{pgs:#?}");
    assert_eq!(act_b.len(), 3, "{pgs:#?}");
    let osd_b = act_b[0];
    let osd_a = if act_a[1] != osd_b {
        act_a[1]
    } else {
        act_a[2]
    };
    let (blk_a, blk_b, blk_c) = (100u32, 1024 + 200, 2048 + 300);
    let off_a = maps[osd_a as usize][&blk_a][0];
    let off_b = maps[osd_b as usize][&blk_b][0];
    let bad_a = flip(&files[osd_a as usize], off_a);
    let bad_b = flip(&files[osd_b as usize], off_b);
    assert_ne!(bad_a, block(blk_a));
    assert_ne!(bad_b, block(blk_b));
    eprintln!(
        "rotted block {blk_a} of vol{vol_id}.0 (pg {pg_a} {act_a:?}) on replica osd.{osd_a} \
         at {off_a}, block {blk_b} of vol{vol_id}.1 (pg {pg_b} {act_b:?}) on primary \
         osd.{osd_b} at {off_b}"
    );

    // A deep scrub finds and repairs both, and nothing else.
    let pgs = deep_scrub(&dir, "two rotten copies");
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    *want.entry(pg_a.clone()).or_default() += 1;
    *want.entry(pg_b.clone()).or_default() += 1;
    for p in &pgs {
        let id = p["pgid"].as_str().unwrap_or_default();
        let n = want.get(id).copied().unwrap_or(0);
        let s = &p["scrub"];
        assert!(
            s["inconsistent_objects"] == n
                && s["repaired_objects"] == n
                && s["unrecoverable_objects"] == 0,
            "pg {id} should report {n} inconsistent and repaired objects, none \
             unrecoverable: {p:#}\nOSD log lines: {:#?}",
            log_lines(&dir, "scrub")
        );
    }
    let status = json(&dir, &["status", "--json"]);
    assert_eq!(status["objects"]["scrub_repaired"], 2, "{status:#}");
    assert_eq!(status["objects"]["unrecoverable"], 0, "{status:#}");
    for l in log_lines(&dir, "copies differ") {
        eprintln!("{l}");
    }

    // The three files now hold the same bytes for both objects: every copy
    // of each of their blocks is the source's, but for the rotten block
    // left behind in the space the repair freed.
    let t0 = Instant::now();
    let maps: Vec<BTreeMap<u32, Vec<u64>>> = files.iter().map(|f| scan(f)).collect();
    eprintln!("scanned the OSD files again in {:?}", t0.elapsed());
    let rotten = [(osd_a, blk_a, &bad_a), (osd_b, blk_b, &bad_b)];
    for (i, m) in maps.iter().enumerate() {
        let mut extra = 0;
        for b in 0..(2 * OBJECT / BLOCK_U64) as u32 {
            let want = block(b);
            let mut good = 0;
            for off in m.get(&b).into_iter().flatten() {
                let got = read_block(&files[i], *off);
                let stale = rotten
                    .iter()
                    .any(|(o, rb, bad)| *o == i as u32 && *rb == b && got == **bad);
                if stale {
                    continue;
                }
                assert!(
                    got == want,
                    "osd.{i}'s file holds a copy of block {b} at {off} unlike the \
                     source (nor the rotten block) after the repair"
                );
                good += 1;
            }
            assert!(
                good >= 1,
                "osd.{i}'s file holds no good copy of block {b} after the repair \
                 (copies at {:?})",
                m.get(&b)
            );
            extra += good - 1;
        }
        eprintln!("osd.{i}: objects 0 and 1 intact ({extra} old good copies in freed space)");
    }
    // End to end: the volume reads back as written (object 1 from the
    // primary that was repaired).
    let mut client = Nbd::connect(&nbd, "v");
    assert_eq!(client.size, VOLUME);
    client.expect_range(&src, 0..VOLUME);
    drop(client);
    // And the replicas agree: a second deep scrub finds nothing.
    let pgs = deep_scrub(&dir, "after the repair");
    for p in &pgs {
        let s = &p["scrub"];
        assert!(
            s["inconsistent_objects"] == 0 && s["unrecoverable_objects"] == 0,
            "the copies still differ after the repair: {p:#}\nOSD log lines: {:#?}",
            log_lines(&dir, "scrub")
        );
    }
    eprintln!("repaired and verified after {:?}", started.elapsed());

    // Object 2 rots on every OSD: nothing can mend it.
    for (i, m) in maps.iter().enumerate() {
        let at = m.get(&blk_c).cloned().unwrap_or_default();
        assert_eq!(at.len(), 1, "osd.{i} holds block {blk_c} at {at:?}");
        flip(&files[i], at[0]);
    }
    let lost = format!("vol{vol_id}.2");
    let pgs = deep_scrub(&dir, "an object rotten everywhere");
    for p in &pgs {
        let id = p["pgid"].as_str().unwrap_or_default();
        let s = &p["scrub"];
        if id == pg_c {
            assert!(
                s["inconsistent_objects"] == 1
                    && s["unrecoverable_objects"] == 1
                    && s["unrecoverable"] == serde_json::json!([lost]),
                "pg {id} should name {lost} unrecoverable: {p:#}\nOSD log lines: {:#?}",
                log_lines(&dir, "scrub")
            );
        } else {
            assert!(
                s["inconsistent_objects"] == 0 && s["unrecoverable_objects"] == 0,
                "pg {id} should be consistent: {p:#}"
            );
        }
    }
    let status = json(&dir, &["status", "--json"]);
    assert_eq!(status["objects"]["unrecoverable"], 1, "{status:#}");
    assert_eq!(status["objects"]["scrub_repaired"], 2, "{status:#}");
    let named = status["pg_notes"].as_array().is_some_and(|a| {
        a.iter()
            .any(|n| n["pg"] == pg_c && n["note"].as_str().is_some_and(|t| t.contains(&lost)))
    });
    assert!(named, "status names no unrecoverable {lost}: {status:#}");
    for l in log_lines(&dir, "no good copy") {
        eprintln!("{l}");
    }

    // Reads of it fail with EIO; the rest of the volume reads fine.
    let mut client = Nbd::connect(&nbd, "v");
    let c = 2 * OBJECT;
    assert_eq!(
        client.read(u64::from(blk_c) * BLOCK_U64, BLOCK as u32),
        Err(NBD_EIO),
        "a read of the rotten block"
    );
    assert_eq!(
        client.read(c, OBJECT as u32).map(|_| ()),
        Err(NBD_EIO),
        "a read of the whole of {lost}"
    );
    client.expect_range(&src, 0..c);
    client.expect_range(&src, c + OBJECT..VOLUME);
    drop(client);
    let ran = run(
        need("qemu-io", "qemu-utils").args(["-r", "-f", "raw", &uri, "-c", "read 8M 4M"]),
        TOOL_LIMIT,
    );
    let said = format!("{}{}", ran.stdout, ran.stderr);
    eprintln!("qemu-io read 8M 4M: {}", said.trim());
    assert!(
        said.contains("Input/output error"),
        "qemu-io's read of {lost} should fail with EIO: {said}"
    );
    let back = dir.join("v.back");
    let ran = run(
        need("nbdcopy", "libnbd-bin").args([&uri, back.to_str().expect("utf-8 path")]),
        TOOL_LIMIT,
    );
    eprintln!("nbdcopy of the whole volume: {}", ran.stderr.trim());
    assert!(
        !ran.success(),
        "nbdcopy read the whole volume, {lost} included, without an error"
    );

    // A light scrub of one PG, on request: versions and block counts
    // agree (the rot is in content only), so it finds nothing, and only
    // its light-scrub stamp moves.
    let one = pg_list(&dir)
        .iter()
        .find(|p| p["state"] == "active+clean")
        .and_then(|p| p["pgid"].as_str().map(str::to_string))
        .expect("a clean PG");
    let before = pg(&pg_list(&dir), &one).clone();
    // So that a stamp at or after the request is a new scrub's.
    let last = before["scrub"]["last_scrub_unix"].as_u64().unwrap_or(0);
    while unix_now() <= last {
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked_at = unix_now();
    ok(&dir, &["pg", "scrub", &one]);
    let light = wait_json(
        &dir,
        &["pg", "ls", "--json"],
        "a light scrub of one PG",
        SCRUB_LIMIT,
        |v| {
            v.as_array().is_some_and(|a| {
                a.iter().any(|p| {
                    p["pgid"] == one.as_str()
                        && p["scrub"]["last_scrub_unix"].as_u64().unwrap_or(0) >= asked_at
                        && p["scrub"]["progress"].is_null()
                })
            })
        },
    );
    let after = pg(light.as_array().expect("a list"), &one);
    assert_eq!(
        after["scrub"]["last_deep_scrub_unix"], before["scrub"]["last_deep_scrub_unix"],
        "a light scrub is not a deep one: {after:#}"
    );
    assert_eq!(after["scrub"]["inconsistent_objects"], 0, "{after:#}");

    // The schedule: with a 2 s interval every PG is deep-scrubbed again
    // without being asked.
    let stamp = |p: &Value| p["scrub"]["last_deep_scrub_unix"].as_u64().unwrap_or(0);
    let last = pg_list(&dir).iter().map(stamp).max().unwrap_or(0);
    while unix_now() <= last {
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked_at = unix_now();
    ok(&dir, &["pg", "set-deep-scrub-interval", "2s"]);
    wait_json(
        &dir,
        &["pg", "ls", "--json"],
        "every PG deep-scrubbed again on the schedule",
        SCRUB_LIMIT,
        |v| {
            v.as_array()
                .is_some_and(|a| a.len() == PGS as usize && a.iter().all(|p| stamp(p) >= asked_at))
        },
    );
    ok(&dir, &["pg", "set-deep-scrub-interval", "0"]);
    eprintln!("scheduled deep scrubs ran after {:?}", started.elapsed());

    // No OSD died or restarted.
    for (i, pid) in pids.iter().enumerate() {
        assert!(alive(*pid), "osd.{i} (pid {pid}) is gone");
        assert_eq!(osd_pid(&dir, i as u32), *pid, "osd.{i} restarted");
    }
    eprintln!("done after {:?}", started.elapsed());
}
