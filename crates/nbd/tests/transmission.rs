//! Transmission-phase behaviour seen through a raw protocol client:
//! structured replies, block status, concurrency, bounds and shutdown.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use pontoon_buf::AlignedBuf;
use pontoon_nbd::proto::*;
use pontoon_nbd::{ServerConfig, start};
use pontoon_volume::{
    BlockVolume, Extent, MemCatalog, MemVolume, VolumeCatalog, VolumeError, VolumeInfo,
};

const VOL: u64 = 16 * MIB;

fn reassemble(chunks: &[ChunkPayload], offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0xeeu8; len];
    let mut covered = 0;
    for c in chunks {
        match c {
            ChunkPayload::Data { offset: o, data } => {
                let at = (o - offset) as usize;
                out[at..at + data.len()].copy_from_slice(data);
                covered += data.len();
            }
            ChunkPayload::Hole { offset: o, len: n } => {
                let at = (o - offset) as usize;
                out[at..at + *n as usize].fill(0);
                covered += *n as usize;
            }
            ChunkPayload::None => {}
            other => panic!("unexpected chunk {other:?}"),
        }
    }
    assert_eq!(covered, len, "chunks must cover the request exactly once");
    out
}

#[test]
fn structured_reads_send_holes_as_hole_chunks() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", true);
    let data = pattern(1, 4096);
    assert_eq!(c.write(1, 8192, &data), 0);
    // 1000..16000 spans hole, data, hole, unaligned at both ends.
    c.request(Command::Read, 0, 2, 1000, 15000);
    let chunks = c.chunks(2);
    assert_eq!(
        chunks,
        vec![
            ChunkPayload::Hole {
                offset: 1000,
                len: 7192
            },
            ChunkPayload::Data {
                offset: 8192,
                data: data.clone()
            },
            ChunkPayload::Hole {
                offset: 12288,
                len: 3712
            },
        ]
    );
    // All hole: one chunk; all data: one chunk.
    c.request(Command::Read, 0, 3, 1 << 20, 65536);
    assert_eq!(
        c.chunks(3),
        vec![ChunkPayload::Hole {
            offset: 1 << 20,
            len: 65536
        }]
    );
    c.request(Command::Read, 0, 4, 8192 + 10, 100);
    assert_eq!(
        c.chunks(4),
        vec![ChunkPayload::Data {
            offset: 8202,
            data: data[10..110].to_vec()
        }]
    );
    // DF: exactly one data chunk with the zeros present.
    c.request(Command::Read, CMD_FLAG_DF, 5, 0, 16384);
    let chunks = c.chunks(5);
    assert_eq!(chunks.len(), 1);
    assert_eq!(reassemble(&chunks, 0, 16384)[8192..12288], data[..]);
    // Zero-length read: a lone NONE chunk.
    c.request(Command::Read, 0, 6, 0, 0);
    assert_eq!(c.chunks(6), vec![ChunkPayload::None]);
    c.disconnect();
}

#[test]
fn block_status_reports_holes_as_hole_and_zero() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", true);
    assert_eq!(c.write(1, 8192, &[5u8; 4096]), 0);
    c.request(Command::BlockStatus, 0, 2, 0, 1 << 20);
    let hole = STATE_HOLE | STATE_ZERO;
    let d = |length, flags| BlockDescriptor { length, flags };
    assert_eq!(
        c.chunks(2),
        vec![ChunkPayload::BlockStatus {
            context_id: 1,
            descriptors: vec![d(8192, hole), d(4096, 0), d((1 << 20) - 12288, hole)],
        }]
    );
    // REQ_ONE: a single descriptor; unaligned start clipped to the request.
    c.request(Command::BlockStatus, CMD_FLAG_REQ_ONE, 3, 100, 1 << 20);
    assert_eq!(
        c.chunks(3),
        vec![ChunkPayload::BlockStatus {
            context_id: 1,
            descriptors: vec![d(8092, hole)]
        }]
    );
    // Past the end: EINVAL error chunk.
    c.request(Command::BlockStatus, 0, 4, VOL - 4096, 8192);
    assert!(matches!(
        &c.chunks(4)[..],
        [ChunkPayload::Error {
            error: Errno::EINVAL,
            ..
        }]
    ));
    c.disconnect();
}

#[test]
fn pipelined_unaligned_writes_to_one_block_all_land() {
    let server = serve(&[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    // 64 writes of 64 bytes into block 1, plus unaligned writes straddling
    // blocks 0/1 and 1/2, all sent before reading any reply.
    let mut batch = Vec::new();
    let mut expected = vec![0u8; 3 * 4096];
    let mut add = |batch: &mut Vec<u8>, h: u64, off: u64, data: Vec<u8>| {
        batch.extend_from_slice(
            &Request {
                flags: 0,
                command: Command::Write,
                handle: h,
                offset: off,
                length: data.len() as u32,
            }
            .encode(),
        );
        batch.extend_from_slice(&data);
        expected[off as usize..off as usize + data.len()].copy_from_slice(&data);
    };
    add(&mut batch, 1000, 4000, vec![0xaa; 96]);
    add(&mut batch, 1001, 8190, vec![0xbb; 4]);
    for i in 0..64u64 {
        add(&mut batch, i, 4096 + 1 + i * 63, vec![i as u8 + 1; 63]);
    }
    c.send(&batch);
    let mut handles = HashSet::new();
    for _ in 0..66 {
        let r = c.simple_reply();
        assert_eq!(r.error, 0);
        assert!(handles.insert(r.handle));
    }
    assert_eq!(c.read(2000, 0, 3 * 4096), expected);
    c.disconnect();
}

#[test]
fn write_zeroes_honours_no_hole_and_trim_frees_whole_blocks() {
    let zeroes: Arc<Mutex<Vec<(u64, u64, bool)>>> = Arc::default();
    let z = zeroes.clone();
    let server = start(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        },
        Arc::new(move || {
            let mut volume = CountingVolume::new(MemVolume::new(VOL));
            volume.zeroes = z.clone();
            CountingCatalog {
                name: "vol".into(),
                volume,
            }
        }),
    )
    .unwrap();
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    assert_eq!(c.write(1, 0, &[1u8; 5 * 4096]), 0);
    c.request(
        Command::WriteZeroes,
        CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
        2,
        100,
        3 * 4096,
    );
    assert_eq!(c.simple_reply().error, 0);
    c.request(Command::WriteZeroes, 0, 3, 4 * 4096, 4096);
    assert_eq!(c.simple_reply().error, 0);
    assert_eq!(
        *zeroes.lock().unwrap(),
        vec![(4096, 8192, false), (4 * 4096, 4096, true)]
    );
    let got = c.read(4, 0, 5 * 4096);
    assert!(got[..100].iter().all(|&b| b == 1));
    assert!(got[100..100 + 3 * 4096].iter().all(|&b| b == 0));
    assert!(got[100 + 3 * 4096..4 * 4096].iter().all(|&b| b == 1));
    assert!(got[4 * 4096..].iter().all(|&b| b == 0));
    // Trim and flush with FUA succeed; trimmed whole blocks read as zeros.
    c.request(Command::Trim, CMD_FLAG_FUA, 5, 0, 8192);
    assert_eq!(c.simple_reply().error, 0);
    c.request(Command::Flush, 0, 6, 0, 0);
    assert_eq!(c.simple_reply().error, 0);
    assert_eq!(c.read(7, 0, 8192), vec![0u8; 8192]);
    c.disconnect();
}

#[test]
fn many_pipelined_requests_beyond_the_limits_are_all_answered() {
    // Tiny limits: 4 requests and 80 KiB in flight per connection.
    let config = ServerConfig {
        max_payload: 64 * 1024,
        max_in_flight: 4,
        max_buffered_bytes: 80 * 1024,
        ..Default::default()
    };
    let server = serve_with(config, &[("vol", VOL)]);
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    let n = 2000u64;
    let mut w = c.s.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            let off = (i % 256) * 65536;
            let mut msg = Request {
                flags: 0,
                command: Command::Write,
                handle: i,
                offset: off,
                length: 65536,
            }
            .encode()
            .to_vec();
            msg.extend(std::iter::repeat_n(i as u8, 65536));
            w.write_all(&msg).unwrap();
        }
    });
    let mut seen = HashSet::new();
    for _ in 0..n {
        let r = c.simple_reply();
        assert_eq!(r.error, 0);
        assert!(seen.insert(r.handle));
    }
    sender.join().unwrap();
    // The last write to each slot wins (one connection, replies received).
    let last = (0..n).filter(|i| i % 256 == 255).max().unwrap() as u8;
    let got = c.read(u64::MAX, 255 * 65536, 65536);
    assert!(got.iter().all(|&b| b == last));
    c.disconnect();
}

#[test]
fn several_workers_serve_the_same_volumes_with_4k_minimum_blocks() {
    let shared = MemCatalog::default();
    shared.insert("vol", MemVolume::new(VOL));
    let server = start(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            workers: 3,
            ..Default::default()
        },
        Arc::new(move || shared.clone()),
    )
    .unwrap();
    let mut clients: Vec<Raw> = (0..8).map(|_| Raw::connect(server.local_addr())).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c.option(
            OPT_INFO,
            &InfoRequest {
                name: "vol".into(),
                requests: vec![INFO_BLOCK_SIZE],
            }
            .encode(),
        );
        assert!(
            r.contains(&(
                REP_INFO,
                info_block_size_data(4096, 4096, 32 << 20).to_vec()
            )),
            "{r:?}"
        );
        c.go("vol", false);
        assert_eq!(c.write(1, i as u64 * 4096, &[i as u8 + 1; 4096]), 0);
    }
    for c in clients.iter_mut() {
        let all = c.read(2, 0, 8 * 4096);
        for i in 0..8 {
            assert!(
                all[i * 4096..(i + 1) * 4096]
                    .iter()
                    .all(|&b| b == i as u8 + 1)
            );
        }
    }
    for c in clients {
        c.disconnect();
    }
    server.stop().unwrap();
}

/// A volume whose flush waits for a gate (to hold a request in flight).
#[derive(Clone)]
struct GatedVolume {
    inner: MemVolume,
    gate: Arc<AtomicBool>,
}

impl BlockVolume for GatedVolume {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: AlignedBuf, fua: bool) -> Result<(), VolumeError> {
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), VolumeError> {
        while !self.gate.load(Ordering::Acquire) {
            compio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        self.inner.discard(offset, len).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, u: bool) -> Result<(), VolumeError> {
        self.inner.write_zeroes(offset, len, u).await
    }
    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        self.inner.allocation(offset, len).await
    }
}

struct GatedCatalog(GatedVolume);

impl VolumeCatalog for GatedCatalog {
    type Volume = GatedVolume;
    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        Ok(vec![VolumeInfo {
            name: "vol".into(),
            size: self.0.size(),
        }])
    }
    async fn open(&self, name: &str) -> Result<Option<GatedVolume>, VolumeError> {
        Ok((name == "vol").then(|| self.0.clone()))
    }
}

#[test]
fn stopping_finishes_requests_in_flight_and_answers_the_rest_with_eshutdown() {
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_in_flight: 1,
        ..Default::default()
    };
    let server = start(
        config,
        Arc::new(move || {
            GatedCatalog(GatedVolume {
                inner: MemVolume::new(VOL),
                gate: g.clone(),
            })
        }),
    )
    .unwrap();
    let addr = server.local_addr();
    let mut c = Raw::connect(addr);
    c.go("vol", false);
    let mut idle = Raw::connect(addr);
    idle.go("vol", true);
    // FLUSH blocks in the volume; the two reads queue behind it (one
    // request in flight allowed).
    let mut batch = Vec::new();
    batch.extend_from_slice(
        &Request {
            flags: 0,
            command: Command::Flush,
            handle: 1,
            offset: 0,
            length: 0,
        }
        .encode(),
    );
    batch.extend_from_slice(
        &Request {
            flags: 0,
            command: Command::Read,
            handle: 2,
            offset: 0,
            length: 4096,
        }
        .encode(),
    );
    batch.extend_from_slice(
        &Request {
            flags: 0,
            command: Command::Read,
            handle: 3,
            offset: 0,
            length: 4096,
        }
        .encode(),
    );
    c.send(&batch);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let stopper = std::thread::spawn(move || server.stop());
    std::thread::sleep(Duration::from_millis(200));
    gate.store(true, Ordering::Release);
    let r = c.simple_reply();
    assert_eq!((r.handle, r.error), (1, 0), "the flush in flight completes");
    for h in [2, 3] {
        let r = c.simple_reply();
        assert_eq!((r.handle, r.error), (h, Errno::ESHUTDOWN.0));
    }
    assert!(c.closed_by_server());
    assert!(idle.closed_by_server(), "idle connections are closed too");
    stopper.join().unwrap().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        t0.elapsed()
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener closed"
    );
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let config = ServerConfig {
        handshake_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let server = serve_with(config, &[("vol", VOL)]);
    let t0 = Instant::now();
    let mut c = Raw::connect_bare(server.local_addr());
    assert!(c.closed_by_server());
    assert!(t0.elapsed() >= Duration::from_millis(250));
    let mut c = Raw::connect(server.local_addr());
    c.go("vol", false);
    c.disconnect();
}

#[test]
fn list_and_meta_context_listing() {
    let server = serve(&[("a", MIB), ("b", 3 * MIB + 100)]);
    let mut c = Raw::connect(server.local_addr());
    let r = c.option(OPT_LIST, &[]);
    assert_eq!(
        r,
        vec![
            (
                REP_SERVER,
                rep_server_data("a", "Pontoon volume, 1048576 bytes")
            ),
            (
                REP_SERVER,
                rep_server_data("b", "Pontoon volume, 3145728 bytes")
            ),
            (REP_ACK, vec![]),
        ]
    );
    // Listing contexts: all (no query) and by the "base:" wildcard.
    for queries in [
        vec![],
        vec!["base:".to_string()],
        vec!["x-other:".to_string(), BASE_ALLOCATION.to_string()],
    ] {
        let req = MetaContextRequest {
            export: "a".into(),
            queries,
        };
        let r = c.option(OPT_LIST_META_CONTEXT, &req.encode());
        assert_eq!(
            r,
            vec![
                (REP_META_CONTEXT, meta_context_data(0, BASE_ALLOCATION)),
                (REP_ACK, vec![])
            ]
        );
    }
    let req = MetaContextRequest {
        export: "a".into(),
        queries: vec!["qemu:dirty-bitmap:x".into()],
    };
    assert_eq!(
        c.option(OPT_LIST_META_CONTEXT, &req.encode()),
        vec![(REP_ACK, vec![])]
    );
    // Sizes are whole 4 KiB blocks; GO asks for name and description.
    let r = c.option(
        OPT_GO,
        &InfoRequest {
            name: "b".into(),
            requests: vec![INFO_NAME, INFO_DESCRIPTION],
        }
        .encode(),
    );
    assert_eq!(r[0], (REP_INFO, info_export_data(3 * MIB, 0x16d).to_vec()));
    assert!(r.contains(&(REP_INFO, info_string_data(INFO_NAME, "b"))));
    assert!(r.contains(&(
        REP_INFO,
        info_string_data(INFO_DESCRIPTION, "Pontoon volume, 3145728 bytes")
    )));
    assert_eq!(r.last().unwrap().0, REP_ACK);
    c.disconnect();
}
