//! Snapshots under failure, with real processes: a three-OSD cluster
//! (`pontoon up`, pool of size 3) and its NBD gateway. Through the NBD
//! export, a writer of this file keeps 32 writes in flight to 256 blocks
//! of 4 KiB spread over 8 objects, each write's contents self-describing
//! (block, write sequence number, a checksum over the whole block), and
//! logs when each write was issued and when the gateway acknowledged it;
//! fio writes another part of the volume (128 KiB blocks) with
//! verification alongside.
//! Meanwhile `pontoon snap create` takes eight snapshots (the start and
//! end of each command logged): two before osd.1 is killed with SIGKILL,
//! one the moment it is killed (while its lease runs out), two while it is
//! down, two the moment it is restarted (peering, recovery), one after.
//! When the writer has stopped and every PG is clean again, every
//! snapshot's NBD export (`v@sN`, read-only) and the volume are read back
//! and checked against the log:
//!
//! - every block reads a write that was issued to it, intact, or zeros if
//!   none was (and the gaps between blocks read zeros);
//! - the volume holds every acknowledged write (the block's last
//!   acknowledged write, or the write issued after it, in flight or failed);
//! - each snapshot is a consistent cut: if it holds a write `w` (its block
//!   reads `w` or a later write), it holds every write acknowledged before
//!   `w` was issued, and every write acknowledged before its `snap create`
//!   started; it holds no write issued after its `snap create` returned;
//! - a deep scrub of the pool then finds no replicas that differ.
//!
//! Times are the writer's: an issue time is taken before the request is
//! sent, an acknowledgement time after the reply is read, a command's start
//! before it is spawned and its end after it has exited, so every
//! violation reported happened (the log can only hide some, never invent
//! one). The writer never rewrites a block until its last write is
//! acknowledged (never, after an error), so each block's writes are a
//! chain in time and "holds `w` or a later write" is well defined.
//!
//! `the_cut_checker_rejects_inconsistent_histories` feeds the same checker
//! made-up histories that break each rule, so the check can fail; and on
//! the run's own data, each snapshot's image judged as if it had been
//! taken at the previous snapshot's time must be found wrong.
//!
//! `an_osd_restart_recovers_objects_fragmented_under_snapshots` goes past
//! what one journal record holds: an object fragmented under snapshots is
//! recovered as a chain of records (before, the copy was refused and I/O
//! to the object hung after the restart).
//!
//! Needs etcd-server, fio and qemu-utils (`scripts/deps.sh test`). Asserts
//! on data and on the clients' answers; the waits are bounded polls.
//! PONTOON_KEEP_TEST_DIR=1 keeps the cluster's directory and logs.

mod common;

use std::io::{Read, Write as _};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::qemu::wait_export;
use common::*;

/// One block of the log's writes.
const BLOCK: usize = 4096;
/// Blocks the writer writes, one every [`STRIDE`] bytes from offset 0.
const BLOCKS: u32 = 256;
/// 128 KiB: 32 blocks in each 4 MiB object, 8 objects.
const STRIDE: u64 = 128 << 10;
/// The part of the volume the writer owns.
const REGION: u64 = BLOCKS as u64 * STRIDE;
/// Writes the writer keeps in flight.
const QD: usize = 32;
/// Writes acknowledged between two steps of the scenario.
const STEP: u64 = 400;
/// fio's part of the volume (with verification), away from the writer's,
/// in blocks of 128 KiB (32 per object, as the writer's).
const FIO_OFFSET: &str = "40M";
const FIO_SIZE: &str = "8M";
const FIO_BS: &str = "128k";
/// Starts every block a write wrote.
const MAGIC: &[u8; 8] = b"PNTNCUT1";

const NBD_CMD_READ: u16 = 0;
const NBD_CMD_WRITE: u16 = 1;
const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
const NBD_REPLY_MAGIC: u32 = 0x6744_6698;

// ---------------------------------------------------------------------
// The log and its checker (no I/O; the unit test at the end drives it).
// ---------------------------------------------------------------------

/// One write of the log; times in µs since the writer started.
#[derive(Clone, Debug)]
struct Write {
    block: u32,
    seq: u64,
    issued: u64,
    /// When the gateway acknowledged it; `None` if it never did (answered
    /// with an error, or still in flight).
    acked: Option<u64>,
}

/// One `snap create`: when the command started and when it returned.
#[derive(Clone, Debug)]
struct Snap {
    name: String,
    start: u64,
    end: u64,
}

/// The log: writes by sequence number (`seq` = index + 1), and each
/// block's writes in the order they were issued.
struct History {
    writes: Vec<Write>,
    chains: Vec<Vec<u64>>,
    /// Bytes from one written block to the next.
    stride: u64,
}

impl History {
    /// Panics unless each block's writes form a chain in time (each
    /// acknowledged before the next was issued): the writer's promise, on
    /// which "holds `w` or a later write" rests.
    fn new(writes: Vec<Write>, blocks: u32, stride: u64) -> History {
        let mut chains = vec![Vec::new(); blocks as usize];
        for (i, w) in writes.iter().enumerate() {
            assert_eq!(w.seq, i as u64 + 1, "the log is in sequence order");
            let chain: &mut Vec<u64> = &mut chains[w.block as usize];
            if let Some(prev) = chain.last() {
                let p = &writes[*prev as usize - 1];
                assert!(
                    p.acked.is_some_and(|a| a < w.issued),
                    "the writer issued write #{} to block {} before write #{} to it was acknowledged",
                    w.seq,
                    w.block,
                    p.seq
                );
            }
            chain.push(w.seq);
        }
        History {
            writes,
            chains,
            stride,
        }
    }

    fn write(&self, seq: u64) -> &Write {
        &self.writes[seq as usize - 1]
    }

    /// How far along its block's chain write `seq` is (1 = the first).
    fn position(&self, block: u32, seq: Option<u64>) -> usize {
        match seq {
            None => 0,
            Some(s) => {
                self.chains[block as usize]
                    .iter()
                    .position(|x| *x == s)
                    .expect("decode only returns writes of the block")
                    + 1
            }
        }
    }
}

/// Milliseconds, for messages.
fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

/// The contents write `seq` writes to `block`: magic, block, sequence
/// number, bytes drawn from both, and a crc32c of everything before it.
fn block_bytes(block: u32, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&u64::from(block).to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (u64::from(block) << 1) ^ 1;
    for chunk in b[24..BLOCK - 4].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let crc = crc32c::crc32c(&b[..BLOCK - 4]);
    b[BLOCK - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Which write `bytes`, read from `block` of `image`, is: `None` for
/// zeros (never written), or an error saying what is wrong with it.
fn decode(h: &History, image: &str, block: u32, bytes: &[u8]) -> Result<Option<u64>, String> {
    if bytes.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[BLOCK - 4..].try_into().expect("4 bytes"));
    if &bytes[..8] != MAGIC || crc != crc32c::crc32c(&bytes[..BLOCK - 4]) {
        return Err(format!(
            "{image}: block {block} holds bytes that no write wrote whole (torn or corrupt: bad magic or checksum)"
        ));
    }
    let (owner, seq) = (word(8), word(16));
    if owner != u64::from(block) {
        return Err(format!(
            "{image}: block {block} holds write #{seq} of block {owner} (misplaced)"
        ));
    }
    let issued_here = seq >= 1
        && h.writes
            .get(seq as usize - 1)
            .is_some_and(|w| w.block == block);
    if !issued_here || bytes != block_bytes(block, seq).as_slice() {
        return Err(format!(
            "{image}: block {block} holds write #{seq}, which the writer never issued to it"
        ));
    }
    Ok(Some(seq))
}

/// Decodes an image of the region `h`'s blocks span: one entry per block,
/// and an error for every block that is not a whole write or zeros and for
/// every gap between blocks that is not zeros.
fn decode_image(h: &History, image: &str, data: &[u8]) -> (Vec<Option<u64>>, Vec<String>) {
    let blocks = h.chains.len() as u32;
    let stride = h.stride as usize;
    let mut shown = Vec::with_capacity(blocks as usize);
    let mut bad = Vec::new();
    for b in 0..blocks {
        let at = b as usize * stride;
        match decode(h, image, b, &data[at..at + BLOCK]) {
            Ok(s) => shown.push(s),
            Err(e) => {
                bad.push(e);
                shown.push(None);
            }
        }
        if data[at + BLOCK..at + stride].iter().any(|x| *x != 0) {
            bad.push(format!(
                "{image}: the gap after block {b} holds data, where nothing was written"
            ));
        }
    }
    (shown, bad)
}

/// What a block reads, for messages.
fn reads(seq: Option<u64>) -> String {
    seq.map_or("zeros".to_string(), |s| format!("write #{s}"))
}

/// The volume must hold every acknowledged write: each block its last
/// acknowledged write or a later one.
fn check_head(h: &History, shown: &[Option<u64>]) -> Vec<String> {
    let mut bad = Vec::new();
    for (b, chain) in h.chains.iter().enumerate() {
        let b32 = b as u32;
        let pos = h.position(b32, shown[b]);
        let last_acked = chain
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| h.write(**s).acked.is_some());
        if let Some((i, s)) = last_acked
            && pos < i + 1
        {
            bad.push(format!(
                "the volume lost an acknowledged write: block {b} reads {} but write #{s} to it was acknowledged at {}",
                reads(shown[b]),
                ms(h.write(*s).acked.unwrap_or_default())
            ));
        }
    }
    bad
}

/// Snapshot `snap` (block `b` reading `shown[b]`) must be a consistent
/// cut of the log.
fn check_cut(h: &History, snap: &Snap, shown: &[Option<u64>]) -> Vec<String> {
    let mut bad = Vec::new();
    let name = &snap.name;
    // Nothing issued after the command returned.
    for seq in shown.iter().flatten() {
        let w = h.write(*seq);
        if w.issued > snap.end {
            bad.push(format!(
                "{name} holds write #{seq} (block {}) issued at {}, after `snap create` returned at {}",
                w.block,
                ms(w.issued),
                ms(snap.end)
            ));
        }
    }
    // The newest write it holds, by issue time: every write acknowledged
    // before that one (or before the command started) must be in it.
    let newest = shown
        .iter()
        .flatten()
        .map(|s| h.write(*s))
        .max_by_key(|w| w.issued);
    let cutoff = newest.map_or(snap.start, |w| w.issued.max(snap.start));
    for (b, chain) in h.chains.iter().enumerate() {
        let pos = h.position(b as u32, shown[b]);
        let missed = chain
            .iter()
            .enumerate()
            .find(|(i, s)| *i >= pos && h.write(**s).acked.is_some_and(|a| a < cutoff));
        let Some((_, seq)) = missed else { continue };
        let v = h.write(*seq);
        let acked = v.acked.unwrap_or_default();
        if acked < snap.start {
            bad.push(format!(
                "{name} misses write #{seq} (block {b} reads {}): it was acknowledged at {}, before `snap create` started at {}",
                reads(shown[b]),
                ms(acked),
                ms(snap.start)
            ));
        } else if let Some(w) = newest {
            bad.push(format!(
                "{name} is not a cut: it holds write #{} (block {}) issued at {}, but misses write #{seq} (block {b} reads {}) acknowledged before that, at {}",
                w.seq,
                w.block,
                ms(w.issued),
                reads(shown[b]),
                ms(acked)
            ));
        }
    }
    bad
}

// ---------------------------------------------------------------------
// NBD: a minimal client (fixed newstyle, simple replies).
// ---------------------------------------------------------------------

/// Opens `export` on the gateway at `port`; returns the connection (in
/// transmission) and the export's size.
fn nbd_open(port: u16, export: &str) -> (TcpStream, u64) {
    let (s, size, _) = common::nbd_raw::nbd_export_name(port, export, Duration::from_secs(60));
    (s, size)
}

fn nbd_request(kind: u16, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut r = Vec::with_capacity(28 + BLOCK);
    r.extend_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
    r.extend_from_slice(&0u16.to_be_bytes());
    r.extend_from_slice(&kind.to_be_bytes());
    r.extend_from_slice(&handle.to_be_bytes());
    r.extend_from_slice(&offset.to_be_bytes());
    r.extend_from_slice(&len.to_be_bytes());
    r
}

/// A simple reply's (error, handle).
fn nbd_reply(s: &mut TcpStream) -> std::io::Result<(u32, u64)> {
    let mut rep = [0u8; 16];
    s.read_exact(&mut rep)?;
    if rep[..4] != NBD_REPLY_MAGIC.to_be_bytes() {
        return Err(std::io::Error::other("bad reply magic"));
    }
    let error = u32::from_be_bytes(rep[4..8].try_into().expect("4 bytes"));
    let handle = u64::from_be_bytes(rep[8..].try_into().expect("8 bytes"));
    Ok((error, handle))
}

/// The first `len` bytes (a multiple of 1 MiB) of `export`.
fn read_region(port: u16, export: &str, len: u64) -> Vec<u8> {
    const CHUNK: u32 = 1 << 20;
    let (mut s, size) = nbd_open(port, export);
    assert!(size >= len, "{export} is {size} bytes");
    let mut data = vec![0u8; len as usize];
    for (i, chunk) in data.chunks_mut(CHUNK as usize).enumerate() {
        let off = i as u64 * u64::from(CHUNK);
        s.write_all(&nbd_request(NBD_CMD_READ, i as u64, off, CHUNK))
            .expect("send read");
        let (error, handle) = nbd_reply(&mut s).expect("read reply");
        assert_eq!(handle, i as u64);
        assert_eq!(error, 0, "reading {export} at {off}: NBD error {error}");
        s.read_exact(chunk).expect("read data");
    }
    data
}

// ---------------------------------------------------------------------
// The writer: QD32 over one NBD connection, every write logged.
// ---------------------------------------------------------------------

struct WriterState {
    writes: Vec<Write>,
    /// Blocks with a write in flight, or whose last write failed (never
    /// written again: its outcome is unknown).
    busy: Vec<bool>,
    in_flight: usize,
    acked: u64,
    /// Writes answered with an error.
    failed: Vec<u64>,
    /// Why the connection broke, if it did.
    broken: Option<String>,
}

struct WriterShared {
    /// Blocks written, one every `stride` bytes from offset 0.
    blocks: u32,
    stride: u64,
    state: Mutex<WriterState>,
    cv: Condvar,
    stop: AtomicBool,
    t0: Instant,
}

impl WriterShared {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }
}

struct Writer {
    shared: Arc<WriterShared>,
    sock: TcpStream,
    threads: Vec<JoinHandle<()>>,
}

impl Writer {
    /// Writes `blocks` blocks of volume `v`, one every `stride` bytes.
    fn start(port: u16, t0: Instant, blocks: u32, stride: u64) -> Writer {
        let (sock, size) = nbd_open(port, "v");
        assert!(
            size >= u64::from(blocks) * stride,
            "the volume is {size} bytes"
        );
        let shared = Arc::new(WriterShared {
            blocks,
            stride,
            state: Mutex::new(WriterState {
                writes: Vec::new(),
                busy: vec![false; blocks as usize],
                in_flight: 0,
                acked: 0,
                failed: Vec::new(),
                broken: None,
            }),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            t0,
        });
        let tx = sock.try_clone().expect("clone socket");
        let rx = sock.try_clone().expect("clone socket");
        let s1 = Arc::clone(&shared);
        let s2 = Arc::clone(&shared);
        let threads = vec![
            std::thread::spawn(move || send_loop(&s1, tx)),
            std::thread::spawn(move || receive_loop(&s2, rx)),
        ];
        Writer {
            shared,
            sock,
            threads,
        }
    }

    /// Waits (at most 40 s) until `more` further writes are acknowledged.
    fn wait_acked(&self, more: u64, what: &str) {
        let limit = Duration::from_secs(40);
        let deadline = Instant::now() + limit;
        let mut st = self.shared.state.lock().expect("lock");
        let want = st.acked + more;
        while st.acked < want {
            assert!(st.broken.is_none(), "the writer's connection broke: {st:?}");
            assert!(
                Instant::now() < deadline,
                "{more} writes were not acknowledged within {limit:?} ({what}); in flight: {}",
                st.unanswered(self.shared.stride)
            );
            st = self
                .shared
                .cv
                .wait_timeout(st, Duration::from_millis(100))
                .expect("lock")
                .0;
        }
    }

    /// Stops issuing, waits (at most 60 s) for what is in flight, and
    /// returns the log and the writes answered with an error.
    fn finish(mut self) -> (Vec<Write>, Vec<u64>) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let limit = Duration::from_secs(60);
        let deadline = Instant::now() + limit;
        let mut st = self.shared.state.lock().expect("lock");
        while st.in_flight > 0 {
            assert!(st.broken.is_none(), "the writer's connection broke: {st:?}");
            assert!(
                Instant::now() < deadline,
                "writes still unanswered {limit:?} after the writer stopped: {}",
                st.unanswered(self.shared.stride)
            );
            st = self
                .shared
                .cv
                .wait_timeout(st, Duration::from_millis(100))
                .expect("lock")
                .0;
        }
        assert!(st.broken.is_none(), "the writer's connection broke: {st:?}");
        let out = (std::mem::take(&mut st.writes), st.failed.clone());
        drop(st);
        let _ = self.sock.shutdown(Shutdown::Both);
        for t in self.threads.drain(..) {
            t.join().expect("writer thread");
        }
        out
    }
}

impl WriterState {
    /// The writes in flight: sequence number, block, object, issue time.
    fn unanswered(&self, stride: u64) -> String {
        let failed: std::collections::HashSet<u64> = self.failed.iter().copied().collect();
        let list: Vec<String> = self
            .writes
            .iter()
            .filter(|w| w.acked.is_none() && !failed.contains(&w.seq))
            .map(|w| {
                format!(
                    "#{} block {} (object {}) issued at {}",
                    w.seq,
                    w.block,
                    u64::from(w.block) * stride / (4 << 20),
                    ms(w.issued)
                )
            })
            .collect();
        format!("{} writes: {}", list.len(), list.join("; "))
    }
}

impl std::fmt::Debug for WriterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} issued, {} acknowledged, {} in flight, {} failed, broken: {:?}",
            self.writes.len(),
            self.acked,
            self.in_flight,
            self.failed.len(),
            self.broken
        )
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

fn send_loop(sh: &WriterShared, mut sock: TcpStream) {
    let mut rng: u64 = 0x5eed_cafe_f00d_0001;
    while !sh.stop.load(Ordering::SeqCst) {
        let mut st = sh.state.lock().expect("lock");
        if st.in_flight >= QD || st.broken.is_some() {
            drop(
                sh.cv
                    .wait_timeout(st, Duration::from_millis(50))
                    .expect("lock"),
            );
            continue;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let first = (rng % u64::from(sh.blocks)) as u32;
        let Some(block) = (0..sh.blocks)
            .map(|i| (first + i) % sh.blocks)
            .find(|b| !st.busy[*b as usize])
        else {
            drop(
                sh.cv
                    .wait_timeout(st, Duration::from_millis(50))
                    .expect("lock"),
            );
            continue;
        };
        let seq = st.writes.len() as u64 + 1;
        st.busy[block as usize] = true;
        st.in_flight += 1;
        // Taken before the request leaves: the log's issue time is never
        // later than the real one.
        let issued = sh.now();
        st.writes.push(Write {
            block,
            seq,
            issued,
            acked: None,
        });
        drop(st);
        let mut req = nbd_request(
            NBD_CMD_WRITE,
            seq,
            u64::from(block) * sh.stride,
            BLOCK as u32,
        );
        req.extend_from_slice(&block_bytes(block, seq));
        if let Err(e) = sock.write_all(&req) {
            let mut st = sh.state.lock().expect("lock");
            st.broken.get_or_insert(format!("send: {e}"));
            sh.cv.notify_all();
            return;
        }
    }
}

fn receive_loop(sh: &WriterShared, mut sock: TcpStream) {
    loop {
        let reply = nbd_reply(&mut sock);
        // Taken after the reply is read: never earlier than the real one.
        let now = sh.now();
        let mut st = sh.state.lock().expect("lock");
        match reply {
            Ok((error, seq)) => {
                let Some(w) = seq
                    .checked_sub(1)
                    .and_then(|i| st.writes.get_mut(i as usize))
                else {
                    st.broken = Some(format!("a reply for unknown handle {seq}"));
                    sh.cv.notify_all();
                    return;
                };
                let block = w.block as usize;
                if error == 0 {
                    w.acked = Some(now);
                    st.busy[block] = false;
                    st.acked += 1;
                } else {
                    st.failed.push(seq);
                }
                st.in_flight -= 1;
            }
            Err(e) => {
                if !(sh.stop.load(Ordering::SeqCst) && st.in_flight == 0) {
                    st.broken.get_or_insert(format!("receive: {e}"));
                }
                sh.cv.notify_all();
                return;
            }
        }
        sh.cv.notify_all();
    }
}

// ---------------------------------------------------------------------
// fio with verification, round after round, beside the writer.
// ---------------------------------------------------------------------

struct FioLoop {
    stop: Arc<AtomicBool>,
    pid: Arc<Mutex<Option<u32>>>,
    thread: Option<JoinHandle<Vec<(bool, String)>>>,
}

impl FioLoop {
    fn start(port: u16, dir: &Path) -> FioLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let pid = Arc::new(Mutex::new(None));
        let (stop2, pid2, dir) = (Arc::clone(&stop), Arc::clone(&pid), dir.to_path_buf());
        let thread = std::thread::spawn(move || {
            let mut rounds = Vec::new();
            for n in 1u32.. {
                let out = dir.join(format!("fio-{n}.out"));
                let mut child: Child = {
                    let mut pid = pid2.lock().expect("lock");
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let log = std::fs::File::create(&out).expect("fio log");
                    let child = pontoon_testtools::fio()
                        .args([
                            &format!("--name=verify{n}"),
                            "--ioengine=nbd",
                            &format!("--uri=nbd://127.0.0.1:{port}/v"),
                            "--rw=randwrite",
                            &format!("--bs={FIO_BS}"),
                            "--iodepth=4",
                            &format!("--offset={FIO_OFFSET}"),
                            &format!("--size={FIO_SIZE}"),
                            "--verify=crc32c",
                            "--verify_fatal=1",
                            &format!("--randseed={n}"),
                        ])
                        .stdin(Stdio::null())
                        .stdout(log.try_clone().expect("fio log"))
                        .stderr(log)
                        .spawn()
                        .expect("run fio");
                    *pid = Some(child.id());
                    child
                };
                let status = child.wait().expect("wait for fio");
                *pid2.lock().expect("lock") = None;
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                rounds.push((status.success(), format!("round {n}: {status}\n{text}")));
            }
            rounds
        });
        FioLoop {
            stop,
            pid,
            thread: Some(thread),
        }
    }

    /// Lets the current round finish (at most 90 s) and returns every
    /// round's (passed, report).
    fn finish(mut self) -> Vec<(bool, String)> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().expect("fio loop running");
        let deadline = Instant::now() + Duration::from_secs(90);
        while !thread.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a fio round did not finish within 90 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        thread.join().expect("fio loop")
    }
}

impl Drop for FioLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(pid) = *self.pid.lock().unwrap_or_else(|e| e.into_inner())
            && alive(pid)
        {
            signal(pid, libc::SIGKILL);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------
// The scenario.
// ---------------------------------------------------------------------

fn all_clean(s: &serde_json::Value) -> bool {
    s["osds"]["up"] == 3
        && s["pgs"]["total"].as_u64().is_some_and(|t| t > 0)
        && s["pgs"]["states"]["active+clean"] == s["pgs"]["total"]
}

/// A temporary directory for a cluster; with PONTOON_KEEP_TEST_DIR set it
/// is kept (its logs) for a post-mortem.
fn test_dir(prefix: &str) -> (Option<tempfile::TempDir>, std::path::PathBuf) {
    let (tmp, dir) = tempdir(prefix);
    if std::env::var_os("PONTOON_KEEP_TEST_DIR").is_some() {
        eprintln!("keeping {}", tmp.keep().display());
        return (None, dir);
    }
    (Some(tmp), dir)
}

/// `pontoon snap create v@NAME`, timed by the writer's clock.
fn snap_create(dir: &Path, t0: Instant, name: &str) -> Snap {
    let start = t0.elapsed().as_micros() as u64;
    let out = pontoon(dir, &["snap", "create", &format!("v@{name}")]);
    let end = t0.elapsed().as_micros() as u64;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "snap create v@{name} failed: {stderr}"
    );
    eprintln!(
        "v@{name}: snap create from {} to {}{}",
        ms(start),
        ms(end),
        if stderr.is_empty() {
            String::new()
        } else {
            format!(" ({})", stderr.trim())
        }
    );
    Snap {
        name: format!("v@{name}"),
        start,
        end,
    }
}

/// Reads the volume and every snapshot through NBD and checks them
/// against the log: the head holds every acknowledged write, each
/// snapshot is a consistent cut. Returns what is wrong and each
/// snapshot's image.
fn check_images(port: u16, h: &History, snaps: &[Snap]) -> (Vec<String>, Vec<Vec<Option<u64>>>) {
    let region = h.chains.len() as u64 * h.stride;
    let mut bad = Vec::new();
    let (head, errs) = decode_image(h, "v", &read_region(port, "v", region));
    bad.extend(errs);
    bad.extend(check_head(h, &head));
    let mut images = Vec::new();
    for snap in snaps {
        wait_export(port, &snap.name);
        let (shown, errs) = decode_image(h, &snap.name, &read_region(port, &snap.name, region));
        bad.extend(errs);
        bad.extend(check_cut(h, snap, &shown));
        let held = shown.iter().flatten().count();
        eprintln!(
            "{}: {held} blocks written, {} differ from the volume",
            snap.name,
            shown.iter().zip(&head).filter(|(a, b)| a != b).count()
        );
        images.push(shown);
    }
    (bad, images)
}

/// Deep-scrubs pool `p` (which compares the heads' data and the clones'
/// metadata of every replica) and names every PG where copies differ.
fn deep_scrub_findings(dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for pg in deep_scrub(dir, "p", Duration::from_secs(60)) {
        let sc = &pg["scrub"];
        if sc["inconsistent_objects"] != 0 || sc["unrecoverable_objects"] != 0 {
            bad.push(format!(
                "deep scrub found replicas that differ in pg {}: {sc}",
                pg["pgid"]
            ));
        }
    }
    bad
}

#[test]
fn snapshots_taken_while_an_osd_is_killed_and_restarted_are_consistent_cuts() {
    let started = Instant::now();
    let (_tmp, dir) = test_dir("pontoon-snapfail-");
    let port = free_port();
    let _up = Up::start_with(&dir, 3, &["--nbd", &format!("127.0.0.1:{port}")]);
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(
        &dir,
        &["volume", "create", "v", "--size", "64M", "--pool", "p"],
    );
    wait_status(&dir, "3 OSDs up and every PG active+clean", all_clean);
    wait_export(port, "v");
    eprintln!("cluster ready after {:?}", started.elapsed());

    let t0 = Instant::now();
    let writer = Writer::start(port, t0, BLOCKS, STRIDE);
    let fio = FioLoop::start(port, &dir);
    let mut snaps = Vec::new();

    writer.wait_acked(STEP, "before v@s1");
    snaps.push(snap_create(&dir, t0, "s1"));
    writer.wait_acked(STEP, "before v@s2");
    snaps.push(snap_create(&dir, t0, "s2"));

    writer.wait_acked(STEP, "before the kill");
    let victim = osd_pid(&dir, 1);
    assert!(
        is_ours(victim, &dir, ""),
        "osd.1's pid {victim} is not ours"
    );
    signal(victim, libc::SIGKILL);
    eprintln!("osd.1 killed at {}", ms(t0.elapsed().as_micros() as u64));
    // While its lease runs out (writes wait for the new interval).
    snaps.push(snap_create(&dir, t0, "s3"));
    wait_status(&dir, "osd.1 down", |s| s["osds"]["up"] == 2);
    // Degraded: writes go to two copies.
    writer.wait_acked(STEP, "with osd.1 down");
    snaps.push(snap_create(&dir, t0, "s4"));
    writer.wait_acked(STEP / 2, "with osd.1 down");
    snaps.push(snap_create(&dir, t0, "s5"));

    // Restarted: peering, then recovery copies it what it missed, s3 to
    // s5's clones included, while two more snapshots are taken at once.
    let out = ok(&dir, &["osd", "start", "1"]);
    assert!(out.contains("osd.1 started"), "{out}");
    eprintln!("osd.1 restarted at {}", ms(t0.elapsed().as_micros() as u64));
    snaps.push(snap_create(&dir, t0, "s6"));
    snaps.push(snap_create(&dir, t0, "s7"));
    writer.wait_acked(STEP, "after the restart");
    snaps.push(snap_create(&dir, t0, "s8"));
    writer.wait_acked(STEP, "after v@s8");

    let (writes, failed) = writer.finish();
    let rounds = fio.finish();
    let acked = writes.iter().filter(|w| w.acked.is_some()).count();
    eprintln!(
        "writer: {} writes, {acked} acknowledged, {} failed, over {}; fio: {} rounds; at {:?}",
        writes.len(),
        failed.len(),
        ms(t0.elapsed().as_micros() as u64),
        rounds.len(),
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "the gateway answered writes {failed:?} with an error while one OSD of three was down"
    );
    assert!(!rounds.is_empty(), "fio ran no round");
    for (passed, report) in &rounds {
        assert!(passed, "fio's verification failed: {report}");
    }

    wait_status(&dir, "3 OSDs up and every PG clean again", all_clean);
    eprintln!("clean again after {:?}", started.elapsed());

    let h = History::new(writes, BLOCKS, STRIDE);
    let (mut bad, images) = check_images(port, &h, &snaps);
    // The checker is not blind on this run's data: where a write was
    // issued after one snapshot returned and acknowledged before the next
    // started (the next must hold it), the next's image judged as if taken
    // at the first's time is found wrong. The pairs with hundreds of
    // writes between them (all but s6, s7) always have such writes.
    let mut judged = 0;
    for (i, pair) in snaps.windows(2).enumerate() {
        let between = h
            .writes
            .iter()
            .any(|w| w.issued > pair[0].end && w.acked.is_some_and(|a| a < pair[1].start));
        if !between {
            continue;
        }
        judged += 1;
        assert!(
            !check_cut(&h, &pair[0], &images[i + 1]).is_empty(),
            "the checker found nothing wrong with {}'s image taken as {}",
            pair[1].name,
            pair[0].name
        );
    }
    assert!(
        judged >= 5,
        "only {judged} snapshot pairs had writes between them"
    );
    bad.extend(deep_scrub_findings(&dir));
    let shown_bad: Vec<&String> = bad.iter().take(20).collect();
    assert!(
        bad.is_empty(),
        "{} violations (first 20):\n{shown_bad:#?}",
        bad.len()
    );
    eprintln!("done after {:?}", started.elapsed());
}

// ---------------------------------------------------------------------
// Past one journal record.
// ---------------------------------------------------------------------

/// An object whose head and clones hold more extents than one journal
/// record takes (512). While osd.1 is down, the writer scatters 4 KiB
/// writes over every other block of one object (512 blocks, none adjacent)
/// and three snapshots are taken between bursts; osd.1 is restarted. Its
/// copy of the object must be recovered (head and three clones, several
/// hundred extents each, installed as a chain of journal records) and I/O
/// to the object must go on. Before chains, the copy was refused, the PG
/// stayed degraded and the writes to the object waited until osd.1 was
/// marked out.
#[test]
fn an_osd_restart_recovers_objects_fragmented_under_snapshots() {
    const SPARSE_BLOCKS: u32 = 512;
    const SPARSE_STRIDE: u64 = 8 << 10;
    let (_tmp, dir) = test_dir("pontoon-snapfrag-");
    let port = free_port();
    let _up = Up::start_with(&dir, 3, &["--nbd", &format!("127.0.0.1:{port}")]);
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(
        &dir,
        &["volume", "create", "v", "--size", "16M", "--pool", "p"],
    );
    wait_status(&dir, "3 OSDs up and every PG active+clean", all_clean);
    wait_export(port, "v");

    let t0 = Instant::now();
    let writer = Writer::start(port, t0, SPARSE_BLOCKS, SPARSE_STRIDE);
    writer.wait_acked(300, "before the kill");
    signal(osd_pid(&dir, 1), libc::SIGKILL);
    wait_status(&dir, "osd.1 down", |s| s["osds"]["up"] == 2);
    let mut snaps = Vec::new();
    for i in 1..=3 {
        writer.wait_acked(300, "with osd.1 down");
        snaps.push(snap_create(&dir, t0, &format!("f{i}")));
    }
    writer.wait_acked(300, "with osd.1 down");
    let out = ok(&dir, &["osd", "start", "1"]);
    assert!(out.contains("osd.1 started"), "{out}");
    writer.wait_acked(
        300,
        "after osd.1's restart: is its copy of object 0 (head and three clones) refused as larger than one journal record? see log/osd.*.log",
    );
    let (writes, failed) = writer.finish();
    assert!(failed.is_empty(), "writes {failed:?} failed");
    wait_status(&dir, "every PG clean after osd.1's restart", all_clean);
    let h = History::new(writes, SPARSE_BLOCKS, SPARSE_STRIDE);
    let (mut bad, _) = check_images(port, &h, &snaps);
    bad.extend(deep_scrub_findings(&dir));
    assert!(bad.is_empty(), "{} violations: {bad:#?}", bad.len());
}

// ---------------------------------------------------------------------
// The checker can fail.
// ---------------------------------------------------------------------

#[test]
fn the_cut_checker_rejects_inconsistent_histories() {
    // Block 0: #1 [0, 10], #3 [30, 40]. Block 1: #2 [5, 20], #4 [50, 60].
    // Block 2: #5 issued at 55, never acknowledged.
    let w = |block, seq, issued, acked| Write {
        block,
        seq,
        issued,
        acked,
    };
    let h = History::new(
        vec![
            w(0, 1, 0, Some(10)),
            w(1, 2, 5, Some(20)),
            w(0, 3, 30, Some(40)),
            w(1, 4, 50, Some(60)),
            w(2, 5, 55, None),
        ],
        3,
        STRIDE,
    );
    let snap = |start, end| Snap {
        name: "v@t".into(),
        start,
        end,
    };
    let one = |v: Vec<String>, want: &str| {
        assert_eq!(v.len(), 1, "{v:#?}");
        assert!(v[0].contains(want), "{v:#?}");
    };

    // Consistent cuts pass.
    assert!(check_cut(&h, &snap(25, 35), &[Some(1), Some(2), None]).is_empty());
    assert!(check_cut(&h, &snap(25, 35), &[Some(3), Some(2), None]).is_empty());
    assert!(check_cut(&h, &snap(15, 70), &[Some(1), None, None]).is_empty());
    assert!(check_cut(&h, &snap(45, 70), &[Some(3), Some(4), Some(5)]).is_empty());

    // Holds #3 (issued at 30) but not #2, acknowledged at 20.
    one(
        check_cut(&h, &snap(15, 35), &[Some(3), None, None]),
        "is not a cut: it holds write #3 (block 0) issued at 0.030 ms, but misses write #2",
    );
    // Misses #1, acknowledged before the command started.
    one(
        check_cut(&h, &snap(15, 35), &[None, None, None]),
        "misses write #1 (block 0 reads zeros): it was acknowledged at 0.010 ms, before `snap create` started",
    );
    // Holds #4, issued after the command returned (and so, too, misses
    // #3, acknowledged before #4 was issued).
    let v = check_cut(&h, &snap(25, 35), &[Some(1), Some(4), None]);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v[0].contains("holds write #4 (block 1) issued at 0.050 ms, after `snap create` returned"),
        "{v:#?}"
    );
    assert!(v[1].contains("misses write #3"), "{v:#?}");

    // The head: every acknowledged write, or a later one.
    assert!(check_head(&h, &[Some(3), Some(4), None]).is_empty());
    assert!(check_head(&h, &[Some(3), Some(4), Some(5)]).is_empty());
    one(
        check_head(&h, &[Some(1), Some(4), None]),
        "block 0 reads write #1 but write #3 to it was acknowledged",
    );

    // Bytes: torn, misplaced, never issued there.
    let mut torn = block_bytes(0, 3);
    torn[2000] ^= 1;
    assert!(
        decode(&h, "v", 0, &torn)
            .unwrap_err()
            .contains("torn or corrupt")
    );
    assert!(
        decode(&h, "v", 0, &block_bytes(1, 2))
            .unwrap_err()
            .contains("misplaced")
    );
    assert!(
        decode(&h, "v", 0, &block_bytes(0, 2))
            .unwrap_err()
            .contains("never issued")
    );
    assert_eq!(decode(&h, "v", 0, &block_bytes(0, 3)), Ok(Some(3)));
    assert_eq!(decode(&h, "v", 0, &[0u8; BLOCK]), Ok(None));

    // A whole image: one torn block and data in a gap are both named.
    let mut img = vec![0u8; REGION as usize];
    img[..BLOCK].copy_from_slice(&block_bytes(0, 3));
    img[STRIDE as usize..STRIDE as usize + BLOCK].copy_from_slice(&torn);
    img[BLOCK + 7] = 1;
    let big = History::new(h.writes.clone(), BLOCKS, STRIDE);
    let (shown, errs) = decode_image(&big, "v", &img);
    assert_eq!(shown[0], Some(3));
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs[0].contains("gap after block 0"), "{errs:#?}");
    assert!(errs[1].contains("block 1 holds bytes"), "{errs:#?}");
}
